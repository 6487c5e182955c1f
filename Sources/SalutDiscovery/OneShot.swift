import Foundation
import SalutStreams

/// A continuation that is resumed at most once, by whichever of several racing events comes
/// first (a result, a timeout, a cancellation). Later attempts are ignored.
final class OneShot<T: Sendable>: @unchecked Sendable {
    // @unchecked: `continuation`, `early` and `done` are guarded by `lock` (a `StateLock`).

    private let lock = StateLock()
    private var continuation: CheckedContinuation<T, any Error>?
    private var early: Result<T, DiscoveryError>?
    private var done = false

    /// Installs the continuation; if a result came before it, resumes at once.
    func set(_ continuation: CheckedContinuation<T, any Error>) {
        let ready = lock.withLock { () -> Result<T, DiscoveryError>? in
            if let early { return early }
            self.continuation = continuation
            return nil
        }
        if let ready { continuation.resume(with: ready.mapError { $0 as any Error }) }
    }

    /// Waits for the result: what `succeed` or `fail` gives first, ``DiscoveryError/timedOut``
    /// once `seconds` pass (counted on `queue`), ``DiscoveryError/cancelled`` when the calling
    /// task is cancelled.
    /// - Throws: the ``DiscoveryError`` that came first.
    func value(within seconds: TimeInterval, on queue: DispatchQueue) async throws -> T {
        queue.asyncAfter(deadline: .now() + seconds) { self.fail(.timedOut) }
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { set($0) }
        } onCancel: {
            fail(.cancelled)
        }
    }

    func succeed(_ value: T) { finish(.success(value)) }
    func fail(_ error: DiscoveryError) { finish(.failure(error)) }

    private func finish(_ result: Result<T, DiscoveryError>) {
        let waiting = lock.withLock { () -> CheckedContinuation<T, any Error>? in
            guard !done else { return nil }
            done = true
            guard let continuation else {
                early = result
                return nil
            }
            self.continuation = nil
            return continuation
        }
        waiting?.resume(with: result.mapError { $0 as any Error })
    }
}
