import Foundation

/// JSON for peerxfer's machine-readable output, one object a line, written by hand:
/// JSONSerialization took about 40 µs a line, which a 10,000-file transfer felt.
public enum JSONLine {
    /// `object` as one line of JSON, keys sorted.
    public static func object(_ object: [String: Any]) -> String {
        "{" + object.keys.sorted().map { string($0) + ":" + value(object[$0]!) }.joined(separator: ",") + "}"
    }

    /// One value as JSON: strings, booleans, integers, finite doubles (others are null),
    /// arrays and string-keyed objects of those, optionals; anything else as its description.
    public static func value(_ value: Any) -> String {
        switch value {
        case let text as String: return string(text)
        case let flag as Bool: return flag ? "true" : "false"
        case let number as Int: return String(number)
        case let number as UInt64: return String(number)
        case let number as Int64: return String(number)
        case let number as UInt32: return String(number)
        case let number as Int32: return String(number)
        case let number as UInt16: return String(number)
        case let number as Double: return number.isFinite ? String(number) : "null"
        case let list as [Any]: return "[" + list.map { Self.value($0) }.joined(separator: ",") + "]"
        case let nested as [String: Any]: return object(nested)
        default:
            // An optional that was put in as `Any`: its value, or null.
            let mirror = Mirror(reflecting: value)
            if mirror.displayStyle == .optional {
                return mirror.children.first.map { Self.value($0.value) } ?? "null"
            }
            return string(String(describing: value))
        }
    }

    /// A JSON string: quotes, backslashes and control characters escaped, the rest as is.
    public static func string(_ text: String) -> String {
        // Most names need no escape: they are taken whole.
        if !text.utf8.contains(where: { $0 < 0x20 || $0 == 0x22 || $0 == 0x5c || $0 == 0x7f }) {
            return "\"" + text + "\""
        }
        var out = "\""
        out.unicodeScalars.reserveCapacity(text.unicodeScalars.count + 2)
        for scalar in text.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            case _ where scalar.value < 0x20 || scalar.value == 0x7f:
                out +=
                    "\\u" + String(repeating: "0", count: 4 - String(scalar.value, radix: 16).count)
                    + String(scalar.value, radix: 16)
            default: out.unicodeScalars.append(scalar)
            }
        }
        return out + "\""
    }
}
