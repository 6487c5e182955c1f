import Foundation

// CoreFoundation's names for the stream types and values, as CFNetwork code spells them.
// swift-corelibs-foundation keeps CoreFoundation to itself, so none of these exist on Linux.
// On Apple's systems the CF types are toll-free bridged to Foundation's classes; here they are
// the Foundation classes themselves, so `Unmanaged<CFReadStream>.takeRetainedValue()` is an
// `InputStream` and `as InputStream` is a no-op. The functions are in CFStreamFunctions.swift.

/// CoreFoundation's read stream: Foundation's `InputStream` (toll-free bridged on Apple's
/// systems, the same class here).
public typealias CFReadStream = InputStream
/// CoreFoundation's write stream: Foundation's `OutputStream`.
public typealias CFWriteStream = OutputStream
/// CoreFoundation's string: Foundation's `NSString` (`"host" as CFString` compiles).
public typealias CFString = NSString
/// CoreFoundation's signed size and count type.
public typealias CFIndex = Int
/// Any CoreFoundation object.
public typealias CFTypeRef = AnyObject
/// CoreFoundation's boolean object: an `NSNumber` holding a `Bool`.
public typealias CFBoolean = NSNumber
/// CoreFoundation's null object: Foundation's `NSNull`.
public typealias CFNull = NSNull
/// CoreFoundation's error: Foundation's `NSError`.
public typealias CFError = NSError
/// CoreFoundation's dictionary: Foundation's `NSDictionary` (`settings as CFDictionary` compiles).
public typealias CFDictionary = NSDictionary
/// A stream's status as CoreFoundation reports it: the same cases and raw values as
/// `Stream.Status` (`.notOpen`, `.opening`, `.open`, …, `.error`).
public typealias CFStreamStatus = Stream.Status

/// CoreFoundation's memory allocator. Salut's streams are Swift objects, so no allocator is
/// ever used: pass ``kCFAllocatorDefault`` or `nil`, as most Apple code does.
public final class CFAllocator: Sendable {
    private init() {}
}

/// The default allocator: `nil`, as on Apple's systems, where it is `NULL`.
public let kCFAllocatorDefault: CFAllocator? = nil

/// The boolean `true` object. Computed: an `NSNumber` is not `Sendable`, so a stored global
/// one could not be shared between threads.
public var kCFBooleanTrue: CFBoolean! { NSNumber(value: true) }
/// The boolean `false` object.
public var kCFBooleanFalse: CFBoolean! { NSNumber(value: false) }
/// The null object (in an SSL-settings dictionary, `kCFStreamSSLPeerName: kCFNull` skips the
/// certificate's name check).
public var kCFNull: CFNull! { NSNull() }

/// The name of a stream property, as `CFReadStreamSetProperty` and `CFWriteStreamSetProperty`
/// take it: `CFStreamPropertyKey(rawValue: kCFStreamPropertySocketSecurityLevel)`. It names the
/// same property as the `Stream.PropertyKey` with the same text.
public struct CFStreamPropertyKey: RawRepresentable, Hashable, Sendable {
    private let name: String

    /// The key's text, as the `CFString` it is on Apple's systems.
    public var rawValue: CFString { NSString(string: name) }

    /// A key from its text (`kCFStreamPropertySocketSecurityLevel`,
    /// `kCFStreamPropertySSLSettings`, …).
    public init(rawValue: CFString) {
        name = String(describing: rawValue)
    }

    /// A key from its text, without the label.
    public init(_ rawValue: CFString) {
        self.init(rawValue: rawValue)
    }

    /// The Foundation key for the same property.
    var streamKey: Stream.PropertyKey { Stream.PropertyKey(rawValue: name) }
}
