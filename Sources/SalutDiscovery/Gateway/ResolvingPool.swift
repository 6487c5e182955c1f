extension DiscoveryGateway {
    /// Which connection to avahi-daemon resolves which followed service: the least loaded,
    /// made when every one has its share (the daemon gives a client 1,024 objects, and a followed
    /// service holds a resolver per interface and protocol). Least loaded, not in turn: services
    /// leave in any order, and taking turns let one connection fill up as others emptied.
    /// A value, used by the gateway's loop alone; `Context` is a parameter so that tests need no
    /// daemon.
    struct ResolvingPool<Context> {
        /// Services per connection before another is made.
        let share: Int
        /// Connections at most (past it, the least loaded takes more than its share).
        let maximumContexts: Int
        private let make: (Int) -> Context
        private(set) var contexts: [Context] = []
        private var load: [Int] = []
        private var assigned: [ServiceKey: Int] = [:]

        init(share: Int, maximumContexts: Int, make: @escaping (Int) -> Context) {
            self.share = max(1, share)
            self.maximumContexts = max(1, maximumContexts)
            self.make = make
        }

        /// The connection to resolve `key` through (the one it had is given back first).
        mutating func assign(_ key: ServiceKey) -> Context {
            release(key)
            let lightest = load.indices.min { load[$0] < load[$1] }
            let index: Int
            if let lightest, load[lightest] < share || contexts.count >= maximumContexts {
                index = lightest
            } else {
                contexts.append(make(contexts.count))
                load.append(0)
                index = contexts.count - 1
            }
            load[index] += 1
            assigned[key] = index
            return contexts[index]
        }

        /// `key` is no longer resolved.
        mutating func release(_ key: ServiceKey) {
            guard let index = assigned.removeValue(forKey: key) else { return }
            load[index] -= 1
        }

        /// How many services each connection resolves now.
        var loads: [Int] { load }
    }
}
