import Foundation

// CFNetwork's stream functions, for code that creates and drives its streams the CoreFoundation
// way (WebSocket, MQTT and XMPP clients, older Bonjour samples). Each is a thin wrapper over the
// Foundation method it names, so a stream behaves the same whichever spelling drives it: in
// particular, TLS asked for with `CFReadStreamSetProperty` follows Salut's rule that a TLS request
// that cannot be honoured fails the streams instead of letting them talk in the clear.
// `CFStreamCreatePairWithSocketToHost` is in SalutDiscovery (it resolves `.local` names), and
// `CFReadStreamSetDispatchQueue`/`CFWriteStreamSetDispatchQueue` in StreamDispatchQueue.swift.
// Not provided: `CFReadStreamSetClient`/`CFWriteStreamSetClient` (C callbacks with a context
// structure; set a `StreamDelegate` instead) and the run-loop scheduling functions (schedule the
// stream with `schedule(in:forMode:)`); the porting guide says so.

/// Creates a bound pair: what is written to the write stream can be read from the read stream,
/// through a buffer of `transferBufferSize` bytes (`Stream.getBoundStreams(withBufferSize:…)`).
/// Both streams are returned retained and unopened, as CoreFoundation's "Create" rule says:
/// take them with `takeRetainedValue()`.
public func CFStreamCreateBoundPair(
    _ alloc: CFAllocator?,
    _ readStream: UnsafeMutablePointer<Unmanaged<CFReadStream>?>?,
    _ writeStream: UnsafeMutablePointer<Unmanaged<CFWriteStream>?>?,
    _ transferBufferSize: CFIndex
) {
    var input: InputStream?
    var output: OutputStream?
    Stream.getBoundStreams(withBufferSize: transferBufferSize, inputStream: &input, outputStream: &output)
    storeCreatedPair(input: input, output: output, in: readStream, writeStream)
}

/// Stores a created pair in CoreFoundation's out-parameters, each retained once for the caller.
package func storeCreatedPair(
    input: InputStream?, output: OutputStream?,
    in readStream: UnsafeMutablePointer<Unmanaged<CFReadStream>?>?,
    _ writeStream: UnsafeMutablePointer<Unmanaged<CFWriteStream>?>?
) {
    readStream?.pointee = input.map { Unmanaged.passRetained($0) }
    writeStream?.pointee = output.map { Unmanaged.passRetained($0) }
}

/// Sets a property of a read stream (`InputStream.setProperty(_:forKey:)`): the security level
/// (`kCFStreamPropertySocketSecurityLevel`) or an SSL-settings dictionary
/// (`kCFStreamPropertySSLSettings`).
/// - Returns: whether the stream took it. A TLS request that cannot be honoured returns false
///   and fails the streams when they open, before any byte moves.
@discardableResult
public func CFReadStreamSetProperty(
    _ stream: CFReadStream?, _ propertyName: CFStreamPropertyKey?, _ propertyValue: CFTypeRef?
) -> Bool {
    setStreamProperty(stream, propertyName, propertyValue)
}

/// Sets a property of a write stream; see ``CFReadStreamSetProperty(_:_:_:)``.
@discardableResult
public func CFWriteStreamSetProperty(
    _ stream: CFWriteStream?, _ propertyName: CFStreamPropertyKey?, _ propertyValue: CFTypeRef?
) -> Bool {
    setStreamProperty(stream, propertyName, propertyValue)
}

/// Either stream's `setProperty(_:forKey:)`; false without a stream or a key.
private func setStreamProperty(_ stream: Stream?, _ key: CFStreamPropertyKey?, _ value: CFTypeRef?) -> Bool {
    guard let stream, let key else { return false }
    return stream.setProperty(value, forKey: key.streamKey)
}

/// A read stream's property (`InputStream.property(forKey:)`), or nil.
public func CFReadStreamCopyProperty(_ stream: CFReadStream?, _ propertyName: CFStreamPropertyKey?) -> CFTypeRef? {
    guard let stream, let propertyName else { return nil }
    return stream.property(forKey: propertyName.streamKey)
}

/// A write stream's property (`OutputStream.property(forKey:)`), or nil.
public func CFWriteStreamCopyProperty(_ stream: CFWriteStream?, _ propertyName: CFStreamPropertyKey?) -> CFTypeRef? {
    guard let stream, let propertyName else { return nil }
    return stream.property(forKey: propertyName.streamKey)
}

/// Opens a read stream (`open()`).
/// - Returns: false when the stream failed at once (its error is ``CFReadStreamCopyError(_:)``);
///   true when it is open or opening (a connection in progress reports its outcome later).
@discardableResult
public func CFReadStreamOpen(_ stream: CFReadStream?) -> Bool {
    guard let stream else { return false }
    stream.open()
    return stream.streamStatus != .error
}

/// Opens a write stream; see ``CFReadStreamOpen(_:)``.
@discardableResult
public func CFWriteStreamOpen(_ stream: CFWriteStream?) -> Bool {
    guard let stream else { return false }
    stream.open()
    return stream.streamStatus != .error
}

/// Closes a read stream (`close()`).
public func CFReadStreamClose(_ stream: CFReadStream?) {
    stream?.close()
}

/// Closes a write stream (`close()`).
public func CFWriteStreamClose(_ stream: CFWriteStream?) {
    stream?.close()
}

/// Reads up to `bufferLength` bytes (`read(_:maxLength:)`).
/// - Returns: the count read, 0 at the end of the stream, -1 on error.
public func CFReadStreamRead(
    _ stream: CFReadStream?, _ buffer: UnsafeMutablePointer<UInt8>?, _ bufferLength: CFIndex
) -> CFIndex {
    guard let stream, let buffer, bufferLength >= 0 else { return -1 }
    return stream.read(buffer, maxLength: bufferLength)
}

/// Writes up to `bufferLength` bytes (`write(_:maxLength:)`).
/// - Returns: the count written, 0 when the stream is full and closed, -1 on error.
public func CFWriteStreamWrite(
    _ stream: CFWriteStream?, _ buffer: UnsafePointer<UInt8>?, _ bufferLength: CFIndex
) -> CFIndex {
    guard let stream, let buffer, bufferLength >= 0 else { return -1 }
    return stream.write(buffer, maxLength: bufferLength)
}

/// Whether a read would not block (`hasBytesAvailable`).
public func CFReadStreamHasBytesAvailable(_ stream: CFReadStream?) -> Bool {
    stream?.hasBytesAvailable ?? false
}

/// Whether a write would not block (`hasSpaceAvailable`).
public func CFWriteStreamCanAcceptBytes(_ stream: CFWriteStream?) -> Bool {
    stream?.hasSpaceAvailable ?? false
}

/// A read stream's status (`streamStatus`).
public func CFReadStreamGetStatus(_ stream: CFReadStream?) -> CFStreamStatus {
    stream?.streamStatus ?? .error
}

/// A write stream's status (`streamStatus`).
public func CFWriteStreamGetStatus(_ stream: CFWriteStream?) -> CFStreamStatus {
    stream?.streamStatus ?? .error
}

/// A read stream's error (`streamError`, as an `NSError`), or nil when it has none.
public func CFReadStreamCopyError(_ stream: CFReadStream?) -> CFError? {
    stream?.streamError.map { $0 as NSError }
}

/// A write stream's error (`streamError`, as an `NSError`), or nil when it has none.
public func CFWriteStreamCopyError(_ stream: CFWriteStream?) -> CFError? {
    stream?.streamError.map { $0 as NSError }
}
