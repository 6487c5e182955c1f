import Foundation

/// Runs blocking `work` (hashing files, waiting on a child process or a terminal) on a thread
/// of its own and returns its result, so that Swift's shared pool of async threads (as many as
/// there are cores) goes on serving other peers meanwhile.
public func onThreadOfItsOwn<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
    await withCheckedContinuation { continuation in
        Thread.detachNewThread { continuation.resume(returning: work()) }
    }
}
