import Foundation
import SalutStreams

/// A continuation that is resumed at most once, by whichever of several racing events comes
/// first (a result, a timeout, a cancellation): a ``FirstOutcome`` with discovery's timeout and
/// cancellation. Later attempts are ignored.
final class OneShot<T: Sendable>: Sendable {
    private let outcome = FirstOutcome<T>()

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

    /// Installs the continuation; if a result came before it, resumes it at once.
    func set(_ continuation: CheckedContinuation<T, any Error>) { outcome.set(continuation) }

    func succeed(_ value: T) { outcome.finish(.success(value)) }
    func fail(_ error: DiscoveryError) { outcome.finish(.failure(error)) }
}
