import Foundation

/// A continuation that is resumed at most once, by whichever of several racing events comes
/// first (a result, a timeout, a cancellation). Later attempts are ignored.
final class OneShot<T: Sendable>: @unchecked Sendable {
    // @unchecked: `continuation`, `early` and `done` are guarded by `lock`.

    private let lock = NSLock()
    private var continuation: CheckedContinuation<T, any Error>?
    private var early: Result<T, DiscoveryError>?
    private var done = false

    /// Installs the continuation; if a result came before it, resumes at once.
    func set(_ continuation: CheckedContinuation<T, any Error>) {
        lock.lock()
        if let early {
            lock.unlock()
            continuation.resume(with: early.mapError { $0 as any Error })
            return
        }
        self.continuation = continuation
        lock.unlock()
    }

    func succeed(_ value: T) { finish(.success(value)) }
    func fail(_ error: DiscoveryError) { finish(.failure(error)) }

    private func finish(_ result: Result<T, DiscoveryError>) {
        lock.lock()
        guard !done else { lock.unlock(); return }
        done = true
        guard let continuation else {
            early = result
            lock.unlock()
            return
        }
        self.continuation = nil
        lock.unlock()
        continuation.resume(with: result.mapError { $0 as any Error })
    }
}
