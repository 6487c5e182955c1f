import Dispatch
import Foundation

/// The life cycle every Avahi-backed operation shares: attach to the context (start), detach and
/// free its Avahi objects (stop), all on the context's queue.
///
/// Subclasses create their Avahi objects in `clientIsRunning(_:)` and free them in
/// `releaseAvahiObjects()`; they pass `userdata` to Avahi callbacks. The context's attachment
/// keeps the operation alive while Avahi may call back into it.
class QueueOperation: AvahiOperation, @unchecked Sendable {
    // @unchecked: `stopped` and subclasses' state are used only on `context.queue`.

    let context: DiscoveryContext
    /// Set once `stop()` has run (or the operation failed for good); nothing is delivered after.
    private(set) var stopped = false

    init(context: DiscoveryContext) {
        self.context = context
    }

    /// Starts now, or as soon as the daemon is running; restarts after every reconnection.
    final func start() {
        context.queue.async { if !self.stopped { self.context.attach(self) } }
    }

    /// Stops for good: frees the Avahi objects and detaches. Safe to call more than once.
    final func stop() {
        context.queue.async { self.halt() }
    }

    /// Stops for good and returns once the Avahi objects are freed (so a withdrawal has reached
    /// the daemon before, say, the process exits).
    final func stopAndWait() async {
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            context.queue.async {
                self.halt()
                continuation.resume()
            }
        }
    }

    /// Makes an operation with `make`, handing it the waiter its events settle (`succeed` once
    /// it is established, `fail` when it fails for good), starts it, and returns it once it is
    /// established within `seconds`; otherwise stops it. The publishing operations'
    /// (``RegisterOperation``, ``AddressRecordOperation``) one way to wait for the daemon.
    /// - Throws: the `DiscoveryError` it failed with; `timedOut` when not established within
    ///   `seconds`; `cancelled` when the calling task is.
    static func startedAndEstablished<Operation: QueueOperation>(
        within seconds: TimeInterval, on queue: DispatchQueue, _ make: (OneShot<Void>) -> Operation
    ) async throws -> Operation {
        let waiter = OneShot<Void>()
        let operation = make(waiter)
        operation.start()
        do {
            try await waiter.value(within: seconds, on: queue)
        } catch {
            operation.stop()
            throw error
        }
        return operation
    }

    /// `stop()` on the queue, for subclasses that end themselves (a failure).
    final func halt() {
        stopped = true
        releaseAvahiObjects()
        context.detach(self)
    }

    /// The pointer Avahi hands back to callbacks; `Self.from(_:)` turns it back.
    final var userdata: UnsafeMutableRawPointer { Unmanaged.passUnretained(self).toOpaque() }

    /// Recovers the operation from an Avahi callback's userdata.
    static func from(_ userdata: UnsafeMutableRawPointer?) -> Self {
        Unmanaged<Self>.fromOpaque(userdata!).takeUnretainedValue()
    }

    // MARK: For subclasses

    func clientIsRunning(_ client: OpaquePointer) {}
    func clientIsReregistering() {}
    /// The daemon went away: by default just free the Avahi objects.
    func clientIsLost() { releaseAvahiObjects() }
    /// Frees every Avahi object the operation holds.
    func releaseAvahiObjects() {}
}
