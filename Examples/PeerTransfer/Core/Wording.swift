/// Counts in words, for what the tool prints.
public enum Wording {
    /// `count` and `noun`, in the plural (`plural`, or the noun and an "s") unless there is
    /// one: "1 file", "3 files", "2 entries".
    public static func counted(_ count: Int, _ noun: String, plural: String? = nil) -> String {
        "\(count) \(count == 1 ? noun : plural ?? noun + "s")"
    }
}
