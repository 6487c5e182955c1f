import Foundation

/// Counts and durations in words, for what the tool prints.
public enum Wording {
    /// `count` and `noun`, in the plural (`plural`, or the noun and an "s") unless there is
    /// one: "1 file", "3 files", "2 entries".
    public static func counted(_ count: Int, _ noun: String, plural: String? = nil) -> String {
        "\(count) \(count == 1 ? noun : plural ?? noun + "s")"
    }
}

extension Wording {
    /// `seconds` in the largest whole unit that fits: "7 days", "1 hour", "90 seconds"; under a
    /// minute, a fraction to a tenth ("0.5 seconds").
    public static func duration(_ seconds: Double) -> String {
        // A fraction of a second counts under a minute ("0.5 seconds", not "0 seconds").
        let tenths = seconds > 0 && seconds < 60 ? (seconds * 10).rounded(.up) / 10 : seconds
        if tenths.isFinite, tenths != tenths.rounded() { return String(format: "%g seconds", tenths) }
        let whole = Int(max(0, min(tenths, 1e12)))
        for (size, unit) in [(86_400, "day"), (3_600, "hour"), (60, "minute")] where whole >= size && whole % size == 0
        {
            return counted(whole / size, unit)
        }
        return counted(whole, "second")
    }

    /// `name` in at most `limit` characters: cut in the middle, keeping its end (the extension,
    /// which says what the file is: "invoice-…-padding.pdf.exe" must not show as "invoice-…").
    public static func shortened(_ name: String, to limit: Int) -> String {
        guard name.count > limit else { return name }
        let tail = min(24, limit / 3)
        return name.prefix(limit - tail - 1) + "…" + name.suffix(tail)
    }

    /// A byte count as people read it: "0 bytes", "380 MB" (units of 1,000, as `ls --si` and
    /// file managers count; ByteCountFormatter alone writes 0 as "Zero KB").
    public static func bytes(_ count: UInt64) -> String {
        count == 0 ? "0 bytes" : ByteCountFormatter.string(fromByteCount: Int64(clamping: count), countStyle: .file)
    }
}

extension Wording {
    /// `seconds` as a clock shows a time left: "1:42", "1:02:03"; "--:--" when it is not a
    /// finite number.
    public static func clock(_ seconds: Double) -> String {
        guard seconds.isFinite else { return "--:--" }
        let total = Int(max(0, min(seconds, 1e9)).rounded())
        return total >= 3600
            ? String(format: "%d:%02d:%02d", total / 3600, total / 60 % 60, total % 60)
            : String(format: "%d:%02d", total / 60, total % 60)
    }
}

extension Wording {
    /// How long ago `seconds` is, roughly, as people say it: "just now", "5 minutes ago",
    /// "3 hours ago", "2 days ago".
    public static func ago(_ seconds: Double) -> String {
        let whole = Int(max(0, min(seconds, 1e12)))
        if whole < 60 { return "just now" }
        for (size, unit) in [(86_400, "day"), (3_600, "hour"), (60, "minute")] where whole >= size {
            return counted(whole / size, unit) + " ago"
        }
        return "just now"
    }
}
