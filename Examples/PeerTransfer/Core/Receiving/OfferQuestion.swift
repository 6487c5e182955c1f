import Foundation

/// What the person at a receiver is asked about an offer (`serve --accept ask` on a terminal),
/// and what a pick of entries means: the text and the choices, without the terminal. The tool
/// shows ``text``, reads lines, and reads them with ``OfferAnswer`` and ``picked(_:)``.
///
/// Nothing the sender chose comes before its key: the verdict on the key first, the claimed
/// name last; each offered name is escaped, indented and cut short, so that no name can pass
/// for a line of the tool's own (the question, say) however it wraps.
public struct OfferQuestion: Sendable {
    /// How many of an offer's entries the question lists.
    public static let entriesShown = 10
    /// How many characters of each entry's name the question shows.
    public static let nameShown = 100
    /// How many entries a pick lists and takes (the rest are declined).
    public static let pickable = 200

    /// The offer asked about.
    public let offer: IncomingOffer
    /// Whether the question offers "a" (accept, and always trust the sender's key).
    public let offersAlways: Bool

    /// The question about `offer`; "a" is offered when `canTrust` (the tool can record a key)
    /// and the sender is not trusted already.
    public init(_ offer: IncomingOffer, canTrust: Bool) {
        self.offer = offer
        offersAlways = canTrust && !offer.senderTrusted
    }

    /// The question as the terminal shows it, ending with the prompt.
    public var text: String {
        let entries = offer.manifest.entries
        var listing = entries.prefix(Self.entriesShown).map { "  \(Self.shown($0))\n" }.joined()
        if entries.count > Self.entriesShown { listing += "(and \(entries.count - Self.entriesShown) more)\n" }
        let always = offersAlways ? "  (a: accept, and always trust the key \(offer.senderKey))\n" : ""
        let size = Wording.bytes(offer.manifest.totalBytes)
        return
            "\(offer.introduction) offers \(Wording.counted(offer.manifest.fileCount, "file")) (\(size)):\n\(listing)\(always)  (p: pick which to accept)\nAccept? [y/N\(offersAlways ? "/a" : "")/p] "
    }

    /// What is said when an answer is none of the choices (it is asked again, never taken as
    /// a no).
    public var reminder: String {
        "Please answer y (yes), n (no)\(offersAlways ? ", a (always)" : "") or p (pick files): "
    }

    /// The entries a pick offers, numbered from 1, and the prompt for the numbers.
    public var pickList: String {
        let entries = offer.manifest.entries
        let shown = entries.prefix(Self.pickable).enumerated().map { number, entry in
            "  \(number + 1). \(Self.shown(entry))\n"
        }.joined()
        let more =
            entries.count > Self.pickable
            ? "(only the first \(Self.pickable) of \(entries.count) can be picked here; the rest are declined)\n" : ""
        return shown + more + "Accept which? (numbers, like 1 3-5; nothing declines all) "
    }

    /// What is said when a pick is not numbers of the list.
    public var pickReminder: String {
        "Numbers from 1 to \(min(offer.manifest.entries.count, Self.pickable)), like 1 3-5: "
    }

    /// The entries (0-based) that `line` picks, with the folders of the files it picks (a
    /// file comes with its folder); nil when `line` is not numbers of the list.
    public func picked(_ line: String) -> Set<Int>? {
        let entries = offer.manifest.entries
        guard var numbers = OfferAnswer.picked(line, count: min(entries.count, Self.pickable)) else { return nil }
        let paths = numbers.map { entries[$0].path }
        for (index, entry) in entries.enumerated()
        where entry.kind == .directory && paths.contains(where: { $0.hasPrefix(entry.path + "/") }) {
            numbers.insert(index)
        }
        return numbers
    }

    /// An entry as the question shows it: escaped, a folder with "/", cut short.
    private static func shown(_ entry: ManifestEntry) -> String {
        Wording.shortened(Terminal.escape(entry.path) + (entry.kind == .directory ? "/" : ""), to: nameShown)
    }
}

/// What an accept hook's end (`serve --accept ask --hook COMMAND`) means for an offer: all
/// entries when it exits 0 printing nothing, those whose paths it prints when it exits 0
/// printing some, none otherwise; no answer when it was ended (killed, or out of time).
public enum AcceptHookVerdict {
    /// The judgement of a hook that exited with `status` (nil: killed, or out of its time)
    /// after printing `printed`, on an offer of `entries`; `limit` is its time, for the words.
    public static func judgement(
        status: Int32?, printed: Data, entries: [ManifestEntry], limit: TimeInterval
    ) -> Judgement {
        guard let status else {
            return .declined(
                "no answer: the receiver's accept hook did not decide within \(Int(limit)) s", by: .noAnswer)
        }
        guard status == 0 else { return .declined("declined by the receiver's accept hook", by: .hook) }
        let lines = Set(String(decoding: printed, as: UTF8.self).split(separator: "\n").map(String.init))
        let chosen =
            lines.isEmpty
            ? Set(entries.indices) : Set(entries.indices.filter { lines.contains(Terminal.escape(entries[$0].path)) })
        return Judgement(
            accepted: chosen, reason: "declined by the receiver's accept hook (it chose none of the entries)",
            cause: .hook)
    }
}
