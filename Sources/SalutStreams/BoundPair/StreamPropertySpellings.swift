import Foundation

// Apple declares `Stream.setProperty(_:forKey:)` with an `Any?` value, swift-corelibs-foundation
// with `AnyObject?`; and Apple's `kCFStreamPropertySSLSettings` is a CFString that converts to a
// `Stream.PropertyKey` with `as`. These declarations make Apple's spellings compile here:
//
//     input.setProperty(StreamSocketSecurityLevel.negotiatedSSL, forKey: .socketSecurityLevelKey)
//     input.setProperty([kCFStreamSSLPeerName as String: "printer.local"],
//                       forKey: kCFStreamPropertySSLSettings as Stream.PropertyKey)

extension Stream {
    /// Apple's spelling of `setProperty(_:forKey:)`, taking Swift values as well as objects:
    /// a `StreamSocketSecurityLevel`, a `[String: Any]` of SSL settings, a `String`, numbers.
    /// Each is passed on as the object Foundation's own declaration takes, so the stream's
    /// answer is the same either way.
    ///
    /// - Returns: whether the stream took the value (see the stream's `setProperty`: Salut's
    ///   socket streams take the security level and the SSL settings; other keys and bad
    ///   values give false).
    @discardableResult
    public func setProperty(_ property: Any?, forKey key: Stream.PropertyKey) -> Bool {
        setProperty(Self.propertyObject(property), forKey: key)
    }

    /// A settings value as an object: a `StreamSocketSecurityLevel` becomes its raw value (as
    /// the CFString it is on Apple's systems).
    static func settingObject(_ value: Any) -> Any {
        if let level = value as? StreamSocketSecurityLevel { return NSString(string: level.rawValue) }
        return value
    }

    /// The object form of a property value, as Foundation's `AnyObject?` declaration takes it.
    static func propertyObject(_ value: Any?) -> AnyObject? {
        switch value {
        case nil: return nil
        case let level as StreamSocketSecurityLevel: return NSString(string: level.rawValue)
        case let text as String: return NSString(string: text)
        case let settings as [String: Any]: return NSDictionary(dictionary: settings.mapValues(settingObject))
        case let settings as [AnyHashable: Any]:
            // Keys written `kCFStreamSSLLevel as NSString`, as Apple code does.
            var converted: [String: Any] = [:]
            for (key, value) in settings {
                guard let name = key.base as? String ?? (key.base as? NSString).map({ String(describing: $0) }) else {
                    return NSDictionary(dictionary: settings)
                }
                converted[name] = settingObject(value)
            }
            return NSDictionary(dictionary: converted)
        case let object as AnyObject: return object
        }
    }
}

extension Stream.PropertyKey {
    /// A key from an `NSString` constant: `Stream.PropertyKey(kCFStreamPropertySSLSettings)`,
    /// as Salut's README wrote it before `kCFStreamPropertySSLSettings` became an `NSString`.
    public init(_ key: NSString) {
        self.init(rawValue: String(describing: key))
    }
}

/// `kCFStreamPropertySSLSettings as Stream.PropertyKey` compiles on Apple's systems because the
/// key type bridges from `NSString` there; this gives it the same bridge here. Like any public
/// conformance, it holds in every module that imports Salut: there, as on Apple's systems, an
/// `NSString` also casts with `as? Stream.PropertyKey`. (Should a later
/// swift-corelibs-foundation declare it too, this conformance is the one to remove.)
extension Stream.PropertyKey: @retroactive _ObjectiveCBridgeable {
    public typealias _ObjectiveCType = NSString

    public func _bridgeToObjectiveC() -> NSString { NSString(string: rawValue) }

    public static func _forceBridgeFromObjectiveC(_ source: NSString, result: inout Stream.PropertyKey?) {
        result = Stream.PropertyKey(rawValue: String(describing: source))
    }

    public static func _conditionallyBridgeFromObjectiveC(_ source: NSString, result: inout Stream.PropertyKey?) -> Bool
    {
        result = Stream.PropertyKey(rawValue: String(describing: source))
        return true
    }

    public static func _unconditionallyBridgeFromObjectiveC(_ source: NSString?) -> Stream.PropertyKey {
        Stream.PropertyKey(rawValue: source.map { String(describing: $0) } ?? "")
    }
}
