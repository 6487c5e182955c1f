import Dispatch
import Foundation

// Apple code that wants stream events off the run loops calls CoreFoundation's
// `CFReadStreamSetDispatchQueue`/`CFWriteStreamSetDispatchQueue` with its `InputStream` and
// `OutputStream`. swift-corelibs-foundation has neither; these take the same arguments, so such
// code compiles and runs unchanged.

/// Delivers the input stream's delegate calls on `queue` from now on, in order and one after
/// another (even on a concurrent queue), instead of on any run loop (the stream leaves the run
/// loops it was scheduled in, as on Apple's systems; scheduling it in a run loop later leaves
/// the queue, and calls not yet made go there). Nil stops delivery on the queue: calls wait
/// until the stream is scheduled again.
///
/// Works on the streams Salut makes (`Stream.getStreamsToHost`, `Stream.getBoundStreams`,
/// `SocketStreams`, listeners, discovered services); for any other stream nothing happens.
/// Closing the stream ends delivery, as it does for a run loop.
public func CFReadStreamSetDispatchQueue(_ stream: InputStream?, _ queue: DispatchQueue?) {
    (stream as? BoundInputStream)?.setDispatchQueue(queue)
}

/// Delivers the output stream's delegate calls on `queue` from now on; see
/// ``CFReadStreamSetDispatchQueue(_:_:)``.
public func CFWriteStreamSetDispatchQueue(_ stream: OutputStream?, _ queue: DispatchQueue?) {
    (stream as? BoundOutputStream)?.setDispatchQueue(queue)
}

extension Stream {
    /// Delivers this stream's delegate calls on `queue` instead of a run loop, as
    /// `CFReadStreamSetDispatchQueue`/`CFWriteStreamSetDispatchQueue` do, for the streams Salut
    /// makes (any other stream is left as it is). Salut's own spelling: code that must also
    /// build on Apple's systems calls the CF functions, which both have.
    public func setDelegateQueue(_ queue: DispatchQueue?) {
        if let input = self as? BoundInputStream { input.setDispatchQueue(queue) }
        if let output = self as? BoundOutputStream { output.setDispatchQueue(queue) }
    }
}
