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
    // @unchecked: as HandedOver; the object is only used where its owner's calls are made.
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
