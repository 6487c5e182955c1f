extension SocketPump {
    /// The decisions of a ``SocketPump``, without any I/O: which direction of the socket to watch,
    /// when to receive, send, run the TLS handshake, switch TLS on or off, half-close, and release
    /// the connection.
    ///
    /// Each event is a `mutating` method that returns the actions the pump's I/O shell performs;
    /// the outcome of an action comes back as another event (a receive reports what it moved, a send
    /// what it sent). The shell keeps the descriptor, the dispatch sources, the transport and the
    /// buffers; this value keeps nothing but the state, so every path can be driven by a unit test.
    struct StateMachine {
        /// What the transport carries.
        enum Security: Equatable { case plain, tls }

        /// The inbound direction: socket → the input stream's buffer.
        enum Input: Equatable {
            /// Watching for readability.
            case reading
            /// Not watched until the application first uses its input stream (reads, asks whether
            /// bytes are there, or schedules it): what arrives meanwhile waits in the socket, as it
            /// does for an unscheduled CFStream on Apple's systems. Saves a dialled connection that
            /// only writes the registration with epoll, a wake-up of another thread.
            case dormant
            /// The buffer is full; waits for the user to read.
            case full
            /// TLS must write before it can read again.
            case needsWritable
            /// Not read while TLS is being switched on or off.
            case held
            /// The peer's TLS close_notify came with no return to plain bytes asked for. The end of
            /// the TCP stream will be the end of the data, or our `stopTLS` a return to plain bytes;
            /// plain bytes before either are a protocol violation (a peer that leaves TLS waits for
            /// our close_notify before it sends in the clear).
            case peerClosedTLS
            /// The end of the data was delivered, or the user closed the input stream.
            case ended
        }

        /// The outbound direction: the output stream's buffer → socket.
        enum Output: Equatable {
            /// Nothing to send; waits for the user to write.
            case idle
            /// Watching for writability while there is something to send.
            case sending
            /// TLS must read before it can write again.
            case needsReadable
            /// Our direction is closed (half-close sent), or it can never send again.
            case finished
        }

        /// A switch of the connection's security in progress.
        enum Change: Equatable {
            /// To TLS: drain what was written, send the preface, then run the handshake.
            case upgrade
            /// Back to plain bytes: both sides' close_notify must cross.
            case downgrade(closeNotifySent: Bool, peerCloseNotify: Bool)
        }

        /// A connection carrying bytes.
        struct Flow: Equatable {
            var security: Security
            var input: Input
            var output: Output
            var change: Change?
        }

        /// Which socket direction a TLS handshake waits for.
        enum HandshakeWait: Equatable { case read, write, nothing }

        enum State: Equatable {
            /// Not started.
            case idle
            /// TLS handshake; `resuming` is the flow an upgrade returns to (nil for a connection
            /// that is TLS from the start).
            case handshaking(wait: HandshakeWait, resuming: Flow?)
            /// The handshake is done; the trust decision is pending.
            case evaluatingTrust(resuming: Flow?)
            case flowing(Flow)
            /// Released: nothing more happens.
            case closed
        }

        /// What the shell does for the machine.
        enum Action: Equatable {
            /// Create the TLS session (upgrade) or use the one made at start, and advance the
            /// handshake; report `handshakeStepped`.
            case stepHandshake
            /// Ask the trust policy / evaluator; report `trustDecided`.
            case evaluateTrust
            /// The connection (or the upgrade) is ready: report success to whoever waits.
            case reportReady
            /// Receive into the inbound buffer as much as it has room for; report `received` (or
            /// `inboundFull` when there is no room).
            case receive
            /// Send what is pending; report `sent` (or `nothingToSend`).
            case send
            /// Send an upgrade's preface in the clear; report `prefaceSent`.
            case sendPreface
            /// Send our TLS close_notify (for a downgrade); report `closeNotifySent`.
            case sendCloseNotify
            /// Close our direction (TLS close_notify, then TCP half-close); report `sendingFinished`.
            case finishSending
            /// Look (without consuming) whether the TCP stream ended; report `peeked`.
            case peekAtSocket
            /// End of data for the input stream, after what is buffered.
            case endInbound
            /// Carry on in the clear; report the downgrade done.
            case switchToPlain
            /// Refuse a `startTLS`/`stopTLS` that cannot happen now.
            case rejectChange(String)
            /// The connection failed: end both buffers with `error`; `endsSetup` when a pending
            /// connect/upgrade waits for the result, `breaksConnection` when it was reported ready.
            case fail(SocketStreamError, endsSetup: Bool, breaksConnection: Bool)
            /// Both directions are done: release the sources and the descriptor.
            case release
        }

        /// What a peek at the socket found after a TLS close_notify.
        enum Peek: Equatable { case endOfStream, data, nothingYet, failed(SocketStreamError) }

        private(set) var state: State = .idle

        /// The last event that came in a state that never asks for it, with that state: a bug in
        /// the shell (asserted in debug builds while ``assertsUnexpectedEvents``). Nil while none
        /// came. Late events are not unexpected: an outcome arriving after the connection was
        /// released (an action queued in the same step ran after the release), a readiness a
        /// source reported before it was cancelled, and the user's hints (wrote, read, closed),
        /// which mean nothing in a state that already covers them.
        private(set) var unexpectedEvent: String?
        /// Whether an unexpected event stops a debug build (`assertionFailure`); tests that feed
        /// every event to every state turn it off and read ``unexpectedEvent`` instead.
        var assertsUnexpectedEvents = true

        init() {}

        /// Answers an outcome event whose action is not due in this state: late (no action) once
        /// the connection is released; otherwise impossible, so recorded and asserted.
        private mutating func notDue(_ event: String) -> [Action] {
            guard state != .closed else { return [] }
            unexpectedEvent = "\(event) in \(state)"
            if assertsUnexpectedEvents {
                assertionFailure("SocketPump.StateMachine: \(event) in \(state), which never asks for it")
            }
            return []
        }

        // MARK: Interest

        /// Whether the shell should watch the socket for readability.
        var wantsReadable: Bool {
            switch state {
            case .handshaking(let wait, _): return wait == .read
            case .flowing(let flow):
                if flow.output == .needsReadable { return true }
                switch flow.input {
                case .reading, .peerClosedTLS: return true
                default: return false
                }
            case .idle, .evaluatingTrust, .closed: return false
            }
        }

        /// Whether the shell should watch the socket for writability.
        var wantsWritable: Bool {
            switch state {
            case .handshaking(let wait, _): return wait == .write
            case .flowing(let flow): return flow.output == .sending || flow.input == .needsWritable
            case .idle, .evaluatingTrust, .closed: return false
            }
        }

        /// Whether a writer may send straight to the socket: a plain or TLS flow with nothing queued
        /// in the pump, no security change under way, and the output open. (The shell also checks
        /// that its own buffers are empty.)
        var allowsDirectSend: Bool {
            guard case .flowing(let flow) = state, flow.change == nil else { return false }
            return flow.output == .idle || flow.output == .sending
        }

        var isClosed: Bool { state == .closed }

        // MARK: Starting

        /// The socket is connected; `secure` starts a TLS handshake first. A plain connection
        /// reads at once unless `readsAtOnce` is false: then its input stays ``Input/dormant``
        /// until ``readingWanted()`` (a TLS handshake always reads).
        mutating func start(secure: Bool, readsAtOnce: Bool = true) -> [Action] {
            guard state == .idle else { return notDue("start") }
            if secure {
                state = .handshaking(wait: .nothing, resuming: nil)
                return [.stepHandshake]
            }
            state = .flowing(Flow(security: .plain, input: readsAtOnce ? .reading : .dormant, output: .sending))
            // No receive yet: watching for readability registers the socket with epoll, which
            // reports bytes already there, so a first look would only cost a system call.
            return [.reportReady, .send]
        }

        /// What the last handshake step did (OpenSSL's answer, as `TLSConnection` gives it).
        typealias HandshakeProgress = TLSConnection.HandshakeStep

        mutating func handshakeStepped(_ progress: HandshakeProgress) -> [Action] {
            guard case .handshaking(_, let resuming) = state else { return notDue("handshakeStepped") }
            switch progress {
            case .wantRead:
                state = .handshaking(wait: .read, resuming: resuming)
                return []
            case .wantWrite:
                state = .handshaking(wait: .write, resuming: resuming)
                return []
            case .done:
                state = .evaluatingTrust(resuming: resuming)
                return [.evaluateTrust]
            case .failed(let error):
                state = .closed
                return [.fail(.tls(error), endsSetup: true, breaksConnection: resuming != nil), .release]
            }
        }

        /// The trust decision; `failure` says why a refused peer was refused.
        mutating func trustDecided(accepted: Bool, failure: TLSError) -> [Action] {
            guard case .evaluatingTrust(let resuming) = state else { return notDue("trustDecided") }
            guard accepted else {
                state = .closed
                return [.fail(.tls(failure), endsSetup: true, breaksConnection: resuming != nil), .release]
            }
            var flow = resuming ?? Flow(security: .tls, input: .reading, output: .sending)
            flow.security = .tls
            flow.change = nil
            if flow.input == .held || flow.input == .needsWritable || flow.input == .full { flow.input = .reading }
            if flow.output != .finished { flow.output = .sending }
            state = .flowing(flow)
            var actions: [Action] = [.reportReady]
            if flow.input == .reading { actions.append(.receive) }
            if flow.output == .sending { actions.append(.send) }
            return actions
        }

        // MARK: Socket readiness

        mutating func socketReadable() -> [Action] {
            switch state {
            case .handshaking: return [.stepHandshake]
            case .flowing(var flow):
                var actions: [Action] = []
                if flow.output == .needsReadable {
                    flow.output = .sending
                    actions.append(.send)
                }
                switch flow.input {
                case .reading: actions.insert(.receive, at: 0)
                case .peerClosedTLS: actions.insert(.peekAtSocket, at: 0)
                default: break
                }
                state = .flowing(flow)
                return actions
            // Late: a readiness the source reported before the shell stopped watching.
            case .idle, .evaluatingTrust, .closed: return []
            }
        }

        mutating func socketWritable() -> [Action] {
            switch state {
            case .handshaking: return [.stepHandshake]
            case .flowing(var flow):
                var actions: [Action] = []
                if flow.input == .needsWritable {
                    flow.input = .reading
                    actions.append(.receive)
                }
                if flow.output == .sending { actions.append(.send) }
                state = .flowing(flow)
                return actions
            // Late: a readiness the source reported before the shell stopped watching.
            case .idle, .evaluatingTrust, .closed: return []
            }
        }

        // MARK: Receiving

        /// The inbound buffer has no room: stop reading until the user reads.
        mutating func inboundFull() -> [Action] {
            guard case .flowing(var flow) = state else { return notDue("inboundFull") }
            guard flow.input == .reading else { return [] }  // late: see `received`
            flow.input = .full
            state = .flowing(flow)
            return []
        }

        /// What a receive did.
        mutating func received(_ outcome: TransferOutcome) -> [Action] {
            guard case .flowing(var flow) = state else { return notDue("received") }
            // Late: a second receive queued in the same step, after the first changed the input.
            guard flow.input == .reading else { return [] }
            switch outcome {
            case .moved:
                return [.receive]
            case .wouldBlock:
                return []
            case .needsOtherDirection:
                flow.input = .needsWritable
                state = .flowing(flow)
                return []
            case .ended:
                if case .downgrade(let sent, _) = flow.change {
                    // The peer's close_notify: TLS ends once ours is out too.
                    if sent { return switchToPlain(&flow) }
                    flow.change = .downgrade(closeNotifySent: false, peerCloseNotify: true)
                    flow.input = .held
                    state = .flowing(flow)
                    return []
                }
                if flow.security == .tls {
                    // close_notify: the TCP end follows (end of data), or plain bytes do (the peer
                    // left TLS, and waits for our stopTLS). Tell them apart by looking.
                    flow.input = .peerClosedTLS
                    state = .flowing(flow)
                    return [.peekAtSocket]
                }
                flow.input = .ended
                return settle(flow, [.endInbound])
            case .failed(let error):
                return fail(error)
            }
        }

        /// What a peek after the peer's close_notify found.
        mutating func peeked(_ peek: Peek) -> [Action] {
            guard case .flowing(var flow) = state else { return notDue("peeked") }
            guard flow.input == .peerClosedTLS else { return [] }  // late: a second look, queued in the same step
            switch peek {
            case .endOfStream:
                flow.input = .ended
                return settle(flow, [.endInbound])
            case .data:
                // Plain bytes nobody asked for: the peer could otherwise hold the connection open
                // for as long as it likes (we would wait for a stopTLS that never comes).
                return fail(.tls(.protocolError("the peer sent bytes in the clear after its close_notify")))
            case .nothingYet:
                return []
            case .failed(let error):
                return fail(error)
            }
        }

        // MARK: Sending

        /// The pump has nothing queued and the outbound buffer is empty; `outputClosed` when the
        /// user closed the output stream.
        mutating func nothingToSend(outputClosed: Bool) -> [Action] {
            guard case .flowing(var flow) = state else { return notDue("nothingToSend") }
            // Late: a second send queued in the same step (a return to plain bytes queues its own),
            // after the first changed the output.
            guard flow.output == .sending else { return [] }
            switch flow.change {
            case .upgrade:
                return [.sendPreface]
            case .downgrade(closeNotifySent: false, _):
                return [.sendCloseNotify]
            case .downgrade(closeNotifySent: true, _):
                flow.output = .idle
                state = .flowing(flow)
                return []
            case nil:
                if outputClosed { return [.finishSending] }
                flow.output = .idle
                state = .flowing(flow)
                return []
            }
        }

        /// What a send did.
        mutating func sent(_ outcome: TransferOutcome) -> [Action] {
            guard case .flowing(var flow) = state else { return notDue("sent") }
            guard flow.output == .sending else { return [] }  // late: see `nothingToSend`
            switch outcome {
            case .moved:
                return [.send]
            case .wouldBlock:
                return []
            case .needsOtherDirection:
                flow.output = .needsReadable
                state = .flowing(flow)
                return []
            case .ended:
                return fail(.connectionLost("the connection was closed while sending"))
            case .failed(let error):
                return fail(error)
            }
        }

        /// A writer's direct send found that TLS must read first: its bytes go through the buffer.
        mutating func directSendNeedsReadable() -> [Action] {
            guard case .flowing(var flow) = state, flow.output == .idle || flow.output == .sending else {
                return notDue("directSendNeedsReadable")
            }
            flow.output = .needsReadable
            state = .flowing(flow)
            return []
        }

        /// A writer's direct send failed.
        mutating func directSendFailed(_ error: SocketStreamError) -> [Action] {
            guard case .flowing = state else { return notDue("directSendFailed") }
            return fail(error)
        }

        /// What sending our half-close did.
        mutating func sendingFinished(_ outcome: TransferOutcome) -> [Action] {
            guard case .flowing(var flow) = state else { return notDue("sendingFinished") }
            guard flow.output == .sending else { return [] }  // late: see `nothingToSend`
            switch outcome {
            case .wouldBlock:
                return []
            case .needsOtherDirection:
                flow.output = .needsReadable
                state = .flowing(flow)
                return []
            case .moved, .ended, .failed:
                // A peer already gone cannot be told more; our direction is over either way.
                flow.output = .finished
                return settle(flow, [])
            }
        }

        // MARK: The user's side

        /// The user started using the input stream: a dormant input starts reading, with a look at
        /// once, so that what already waits in the socket (bytes, the end) is in the buffer when the
        /// call that woke it (`hasBytesAvailable`, a read) looks.
        mutating func readingWanted() -> [Action] {
            // A hint: only a dormant input changes (a reading one already reads, a handshake reads
            // whatever the input does, a closed connection has nothing to read).
            guard case .flowing(var flow) = state, flow.input == .dormant else { return [] }
            flow.input = .reading
            state = .flowing(flow)
            return [.receive]
        }

        /// The user read (room again) or closed the input stream.
        mutating func inboundChanged(readerClosed: Bool) -> [Action] {
            // A hint: before the flow starts (the flow's first receive looks at the reader) and
            // after the release, nothing changes; nor does room in a buffer that was not full.
            guard case .flowing(var flow) = state else { return [] }
            if readerClosed {
                if flow.input == .ended { return [] }
                flow.input = .ended
                return settle(flow, [])
            }
            guard flow.input == .full else { return [] }
            flow.input = .reading
            state = .flowing(flow)
            return [.receive]
        }

        /// The user wrote to the output stream or closed it.
        mutating func outboundChanged() -> [Action] {
            // A hint: an output already sending (or waiting for TLS) sends what was written, one
            // before the flow sends at its start, and a finished or released one sends nothing.
            guard case .flowing(var flow) = state, flow.output == .idle else { return [] }
            flow.output = .sending
            state = .flowing(flow)
            return [.send]
        }

        /// Both streams were closed. A handshake, a trust decision or a switch of TLS on or off
        /// that nobody waits for any more is given up (a silent peer must not hold the connection);
        /// a connection carrying bytes finishes sending what was written, then half-closes.
        mutating func abandoned() -> [Action] {
            switch state {
            case .handshaking(_, let resuming), .evaluatingTrust(let resuming):
                state = .closed
                return [.fail(.cancelled, endsSetup: true, breaksConnection: resuming != nil), .release]
            case .flowing(let flow) where flow.change != nil:
                state = .closed
                return [.fail(.cancelled, endsSetup: flow.change == .upgrade, breaksConnection: true), .release]
            default:
                // A flow with no change under way goes on (it sends what was written, then
                // half-closes); an idle or released connection has nothing to give up.
                return []
            }
        }

        // MARK: Switching TLS on and off

        /// Switch a plain flow to TLS once what was written so far is sent.
        mutating func startTLS() -> [Action] {
            guard case .flowing(var flow) = state, flow.security == .plain, flow.change == nil else {
                return [
                    .rejectChange(
                        state == .closed ? "the connection is closed" : "TLS is already on, or being switched")
                ]
            }
            guard flow.output != .finished else { return [.rejectChange("the output is closed")] }
            flow.change = .upgrade
            if flow.input != .ended { flow.input = .held }  // bytes after this point belong to TLS
            flow.output = .sending
            state = .flowing(flow)
            return [.send]
        }

        /// What sending the upgrade's preface did: on to the handshake once it is all out.
        mutating func prefaceSent(complete: Bool) -> [Action] {
            guard case .flowing(let flow) = state, flow.change == .upgrade else { return notDue("prefaceSent") }
            guard complete else { return [] }  // the socket is full: wait for writability
            var resuming = flow
            resuming.change = nil
            state = .handshaking(wait: .nothing, resuming: resuming)
            return [.stepHandshake]
        }

        /// Return a TLS flow to plain bytes once what was written so far is sent.
        mutating func stopTLS() -> [Action] {
            guard case .flowing(var flow) = state, flow.security == .tls, flow.change == nil else {
                return [
                    .rejectChange(state == .closed ? "the connection is closed" : "TLS is not on, or being switched")
                ]
            }
            guard flow.output != .finished else { return [.rejectChange("the output is closed")] }
            let peerDone: Bool
            if case .peerClosedTLS = flow.input { peerDone = true } else { peerDone = false }
            flow.change = .downgrade(closeNotifySent: false, peerCloseNotify: peerDone)
            if peerDone { flow.input = .held }
            flow.output = .sending
            state = .flowing(flow)
            return [.send]
        }

        /// What sending our close_notify (for a downgrade) did.
        mutating func closeNotifySent(_ outcome: TransferOutcome) -> [Action] {
            guard case .flowing(var flow) = state, case .downgrade(false, let peerDone) = flow.change else {
                return notDue("closeNotifySent")
            }
            switch outcome {
            case .wouldBlock:
                return []
            case .needsOtherDirection:
                flow.output = .needsReadable
                state = .flowing(flow)
                return []
            case .failed(let error):
                return fail(error)
            case .moved, .ended:
                flow.change = .downgrade(closeNotifySent: true, peerCloseNotify: peerDone)
                flow.output = .idle
                if peerDone { return switchToPlain(&flow) }
                if flow.input == .held || flow.input == .full { flow.input = .reading }
                state = .flowing(flow)
                return flow.input == .reading ? [.receive] : []
            }
        }

        private mutating func switchToPlain(_ flow: inout Flow) -> [Action] {
            flow.security = .plain
            flow.change = nil
            if flow.input != .ended { flow.input = .reading }
            if flow.output != .finished { flow.output = .sending }
            state = .flowing(flow)
            return [.switchToPlain, .receive, .send]
        }

        // MARK: Failing and finishing

        /// The connection broke (an error from the socket or TLS).
        mutating func failed(_ error: SocketStreamError) -> [Action] { fail(error) }

        private mutating func fail(_ error: SocketStreamError) -> [Action] {
            switch state {
            case .closed, .idle:
                // Late, or before the start: nothing to end.
                state = .closed
                return []
            case .handshaking(_, let resuming), .evaluatingTrust(let resuming):
                state = .closed
                return [.fail(error, endsSetup: true, breaksConnection: resuming != nil), .release]
            case .flowing(let flow):
                state = .closed
                return [.fail(error, endsSetup: flow.change == .upgrade, breaksConnection: true), .release]
            }
        }

        /// Stores `flow`, releasing the connection when both directions are done.
        private mutating func settle(_ flow: Flow, _ actions: [Action]) -> [Action] {
            var flow = flow
            if flow.input == .ended && flow.output == .finished {
                state = .closed
                return actions + [.release]
            }
            // Our direction is over but nobody has used the input: read it now, so that the peer's
            // end (or reset) is seen and the connection can end without waiting for the input
            // stream to be closed.
            if flow.output == .finished && flow.input == .dormant {
                flow.input = .reading
                state = .flowing(flow)
                return actions + [.receive]
            }
            state = .flowing(flow)
            return actions
        }
    }
}
