import Foundation

// The few concurrency helpers the package shares, in one place, instead of a box of its own in
// each file. Each `@unchecked` here says what the type cannot check; each use says why it holds.

/// A value handed to another thread or task that then owns it: one owner at a time, the one
/// that made the box using the value no more (or only on the same serial queue or run loop as
/// the new owner). The type cannot check that; each use says, in a comment, who owns the value
/// when.
package struct HandedOver<Value>: @unchecked Sendable {
    // @unchecked: ownership passes with the box (see above); the value is never used from two
    // threads at once.
    package let value: Value
    package init(_ value: Value) { self.value = value }
}

/// An object handed over as ``HandedOver`` is, but held weakly: a call waiting to be made must
/// not keep its object (a stream and its connection) alive.
package struct WeaklyHandedOver<Object: AnyObject>: @unchecked Sendable {
    // @unchecked: loading a weak reference is atomic, and each use calls through it only
    // methods that are safe from any thread (a stream's `refresh` takes its own locks alone).
    package weak var object: Object?
    package init(_ object: Object) { self.object = object }
}

/// A flag that lets one caller through: the first of several racing completions (a result, a
/// timeout, a signal) resumes a continuation, the others do nothing.
package final class OnceFlag: Sendable {
    private let done = Locked(false)

    package init() {}

    /// True for the first caller only.
    package func claim() -> Bool {
        done.withLock { done in
            defer { done = true }
            return !done
        }
    }
}

/// Resumes a continuation with the first of several racing outcomes (a result, a timeout, a
/// cancellation); the later ones do nothing. An outcome that comes before the continuation is
/// installed is kept, and resumes it as soon as it is.
package final class FirstOutcome<T: Sendable>: @unchecked Sendable {
    // @unchecked: every stored var (`continuation`, `done`, `early`) is touched only under `lock`.
    private let lock = StateLock()
    private var continuation: CheckedContinuation<T, any Error>?
    private var done = false
    private var early: Result<T, any Error>?

    package init() {}

    /// Installs the continuation; if an outcome came before it, resumes it at once.
    package func set(_ continuation: CheckedContinuation<T, any Error>) {
        let earlier = lock.withLock { () -> Result<T, any Error>? in
            if let early { return early }
            self.continuation = continuation
            return nil
        }
        if let earlier { continuation.resume(with: earlier) }
    }

    /// Resumes the continuation with `result` unless another outcome came first; true when
    /// this one was the first.
    @discardableResult
    package func finish(_ result: Result<T, any Error>) -> Bool {
        let (first, waiting) = lock.withLock { () -> (Bool, CheckedContinuation<T, any Error>?) in
            guard !done else { return (false, nil) }
            done = true
            guard let continuation else {
                early = result
                return (true, nil)
            }
            self.continuation = nil
            return (true, continuation)
        }
        waiting?.resume(with: result)
        return first
    }
}
