import Foundation

/// A TSIG key (RFC 8945): the name a DNS server knows a shared secret by, and the secret, with
/// which Salut signs the DNS updates that publish services in a wide-area domain.
///
/// Keys come from a file in the format BIND's `tsig-keygen` writes, never from the command
/// line (where other users can read them in the process list):
///
/// ```
/// key "salut-publisher" {
///     algorithm hmac-sha256;
///     secret "Zm9vYmFyYmF6cXV4...";
/// };
/// ```
///
/// Only `hmac-sha256` is supported. The secret is never printed: ``description`` shows the
/// name and algorithm only.
public struct SalutTSIGKey: Sendable, Hashable, CustomStringConvertible, CustomReflectable {
    /// The key's name, as the server's configuration names it (`salut-publisher.`).
    public let name: String
    /// The MAC algorithm (always `hmac-sha256`).
    public let algorithm: String
    let secret: [UInt8]
    let wireName: DNSName

    /// A key from its name and secret.
    /// - Throws: ``DiscoveryError`` (``DiscoveryError/Code-swift.struct/invalidKey``) when the name is not a
    ///   valid DNS name or the secret is empty.
    public init(name: String, secret: [UInt8]) throws {
        do {
            wireName = try DNSName(parsing: name)
        } catch {
            throw DiscoveryError.invalidKey("the key name \"\(name)\" is \(error)")
        }
        guard !wireName.labels.isEmpty else { throw DiscoveryError.invalidKey("the key has no name") }
        guard !secret.isEmpty else { throw DiscoveryError.invalidKey("the key's secret is empty") }
        self.name = wireName.description
        self.algorithm = "hmac-sha256"
        self.secret = secret
    }

    /// A sentence saying that the key file at `path` can be read by others than its owner (a
    /// TSIG secret lets whoever holds it change the zone), and how to fix it; nil when it
    /// cannot, or cannot be examined.
    public static func exposureWarning(forFile path: String) -> String? {
        var info = stat()
        guard stat(path, &info) == 0, info.st_mode & 0o077 != 0 else { return nil }
        return
            "the key file \(path) can be read by others (mode \(String(info.st_mode & 0o777, radix: 8))); anyone who reads it can change the zone: chmod 600 \(path)"
    }

    /// Reads the key of a file in BIND's format (`tsig-keygen`, `named.conf`), which must hold
    /// exactly one.
    /// - Throws: ``DiscoveryError`` (``DiscoveryError/Code-swift.struct/invalidKey``) naming the file and
    ///   what is wrong: unreadable, no key or more than one, an algorithm other than
    ///   `hmac-sha256`, a secret that is not base64.
    public init(contentsOfFile path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            let reason = access(path, R_OK) == 0 ? "it is not a readable file" : String(cString: strerror(errno))
            throw DiscoveryError.invalidKey("cannot read the key file \(path): \(reason)")
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw DiscoveryError.invalidKey("the key file \(path) is not text")
        }
        do {
            self = try Self(parsing: text)
        } catch let error as DiscoveryError {
            throw DiscoveryError.invalidKey("\(path): \(error.reason ?? "\(error)")")
        }
    }

    /// Reads the `key` statement of BIND configuration text, which must hold exactly one (with
    /// several, which one signs would be a guess).
    /// - Throws: ``DiscoveryError`` (``DiscoveryError/Code-swift.struct/invalidKey``) saying what is wrong.
    public init(parsing text: String) throws {
        let tokens = Self.tokens(of: text)
        let statements = tokens.indices.filter { tokens[$0] == "key" && $0 + 2 < tokens.count && tokens[$0 + 2] == "{" }
        guard let start = statements.first else {
            throw DiscoveryError.invalidKey("no `key \"NAME\" { … };` statement (as tsig-keygen writes)")
        }
        guard statements.count == 1 else {
            let names = statements.map { tokens[$0 + 1] }.joined(separator: ", ")
            throw DiscoveryError.invalidKey(
                "\(statements.count) keys (\(names)); give a file with only the one to sign with (tsig-keygen -a hmac-sha256 NAME > FILE)"
            )
        }
        let name = tokens[start + 1]
        var algorithm: String?
        var secret: String?
        var index = start + 3
        while index < tokens.count, tokens[index] != "}" {
            let word = tokens[index]
            let value = index + 1 < tokens.count ? tokens[index + 1] : ""
            switch word {
            case "algorithm": algorithm = value.lowercased(); index += 2
            case "secret": secret = value; index += 2
            default: index += 1
            }
        }
        guard let algorithm else { throw DiscoveryError.invalidKey("the key \(name) names no algorithm") }
        guard algorithm == "hmac-sha256" else {
            throw DiscoveryError.invalidKey(
                "the key \(name) uses \(algorithm); Salut signs with hmac-sha256 only (tsig-keygen -a hmac-sha256)")
        }
        guard let secret, let bytes = Data(base64Encoded: secret) else {
            throw DiscoveryError.invalidKey("the key \(name) has no secret in base64")
        }
        try self.init(name: name, secret: Array(bytes))
    }

    public var description: String { "TSIG key \(name) (\(algorithm))" }

    /// What `dump` and debuggers show: the name and algorithm, never the secret.
    public var customMirror: Mirror { Mirror(self, children: ["name": name, "algorithm": algorithm]) }

    /// Words, quoted strings (without their quotes) and the punctuation `{`, `}` and `;` of BIND
    /// configuration, with `#`, `//` and `/* */` comments left out.
    private static func tokens(of text: String) -> [String] {
        var tokens: [String] = []
        var characters = Array(text)[...]
        var word = ""
        func flush() { if !word.isEmpty { tokens.append(word); word = "" } }
        while let character = characters.popFirst() {
            switch character {
            case "#":
                flush()
                while let next = characters.first, next != "\n" { characters.removeFirst() }
            case "/" where characters.first == "/":
                flush()
                while let next = characters.first, next != "\n" { characters.removeFirst() }
            case "/" where characters.first == "*":
                flush()
                characters.removeFirst()
                while !characters.isEmpty, !(characters.first == "*" && characters.dropFirst().first == "/") {
                    characters.removeFirst()
                }
                characters = characters.dropFirst(2)
            case "\"":
                flush()
                var quoted = ""
                while let next = characters.popFirst(), next != "\"" { quoted.append(next) }
                tokens.append(quoted)
            case "{", "}", ";":
                flush()
                tokens.append(String(character))
            case _ where character.isWhitespace:
                flush()
            default:
                word.append(character)
            }
        }
        flush()
        return tokens
    }
}
