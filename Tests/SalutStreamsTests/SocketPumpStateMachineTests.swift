@testable import SalutStreams
import SalutTestSupport
import XCTest

/// The socket pump's decisions without a socket: each test feeds events and checks the actions
/// and what the pump would watch. `SocketPumpConversationTests` below runs whole exchanges
/// through a scripted `ByteTransport`.
final class SocketPumpStateMachineTests: SalutTestCase {
    typealias Machine = SocketPump.StateMachine
    let lost = SocketStreamError.connectionLost("reset")

    func plainFlow() -> Machine {
        var machine = Machine()
        _ = machine.start(secure: false)
        return machine
    }

    func tlsFlow() -> Machine {
        var machine = Machine()
        _ = machine.start(secure: true)
        _ = machine.handshakeStepped(.done)
        _ = machine.trustDecided(accepted: true, failure: .rejectedByEvaluator)
        return machine
    }

    // MARK: Plain

    func testPlainStartIsReadyAndWatchesBothWays() {
        var machine = Machine()
        XCTAssertFalse(machine.wantsReadable || machine.wantsWritable)
        XCTAssertEqual(
            machine.start(secure: false), [.reportReady, .send], "reading waits for the socket's first readiness")
        XCTAssertTrue(machine.wantsReadable)
        XCTAssertTrue(machine.wantsWritable)
        XCTAssertTrue(machine.allowsDirectSend)
        machine.assertsUnexpectedEvents = false
        XCTAssertEqual(machine.start(secure: false), [], "starts once")
        XCTAssertNotNil(machine.unexpectedEvent, "a second start is the shell's bug")
    }

    func testADormantInputWatchesNothingUntilTheInputIsWanted() {
        var machine = Machine()
        XCTAssertEqual(machine.start(secure: false, readsAtOnce: false), [.reportReady, .send])
        XCTAssertFalse(machine.wantsReadable, "nobody uses the input: the socket is not watched for reading")
        XCTAssertTrue(machine.allowsDirectSend, "writing does not wait for the input")
        XCTAssertEqual(machine.socketReadable(), [], "a stray readiness event reads nothing")
        XCTAssertEqual(machine.inboundChanged(readerClosed: false), [], "a read of the empty buffer is not a change")
        XCTAssertEqual(
            machine.readingWanted(), [.receive], "a look at once: what waits in the socket is buffered for the caller")
        XCTAssertTrue(machine.wantsReadable)
        XCTAssertEqual(machine.socketReadable(), [.receive])
        XCTAssertEqual(machine.readingWanted(), [], "only the first use changes anything")
        XCTAssertTrue(machine.wantsReadable)
    }

    func testInputWantedIsIgnoredOutsideADormantFlow() {
        var idle = Machine()
        XCTAssertEqual(idle.readingWanted(), [], "before the start")
        XCTAssertFalse(idle.wantsReadable)
        var reading = plainFlow()
        XCTAssertEqual(reading.readingWanted(), [])
        _ = reading.inboundFull()
        XCTAssertEqual(reading.readingWanted(), [], "a full buffer stays full")
        XCTAssertFalse(reading.wantsReadable)
        var shaking = Machine()
        _ = shaking.start(secure: true, readsAtOnce: false)
        XCTAssertEqual(shaking.readingWanted(), [])
        XCTAssertEqual(shaking.handshakeStepped(.wantRead), [])
        XCTAssertTrue(shaking.wantsReadable, "a handshake reads whatever the input does")
    }

    func testADormantInputClosedByItsReaderEndsWithoutReading() {
        var machine = Machine()
        _ = machine.start(secure: false, readsAtOnce: false)
        XCTAssertEqual(machine.inboundChanged(readerClosed: true), [])
        XCTAssertFalse(machine.wantsReadable)
        XCTAssertEqual(machine.readingWanted(), [], "a closed input is not woken")
        XCTAssertEqual(machine.nothingToSend(outputClosed: true), [.finishSending])
        XCTAssertEqual(machine.sendingFinished(.moved(0)), [.release], "both directions done")
    }

    func testAFinishedOutputWakesADormantInputSoThePeersEndIsSeen() {
        var machine = Machine()
        _ = machine.start(secure: false, readsAtOnce: false)
        XCTAssertEqual(machine.nothingToSend(outputClosed: true), [.finishSending])
        XCTAssertEqual(
            machine.sendingFinished(.moved(0)), [.receive], "our half-close is sent: read until the peer's end")
        XCTAssertTrue(machine.wantsReadable)
        XCTAssertEqual(
            machine.received(.ended), [.endInbound, .release],
            "both directions over: released, the input stream still open")
    }

    func testAnUpgradeWakesADormantInput() {
        var machine = Machine()
        _ = machine.start(secure: false, readsAtOnce: false)
        _ = machine.nothingToSend(outputClosed: false)
        XCTAssertEqual(machine.startTLS(), [.send])
        XCTAssertFalse(machine.wantsReadable, "bytes after the upgrade belong to TLS")
        _ = machine.nothingToSend(outputClosed: false)
        _ = machine.prefaceSent(complete: true)
        _ = machine.handshakeStepped(.done)
        XCTAssertEqual(
            machine.trustDecided(accepted: true, failure: .rejectedByEvaluator), [.reportReady, .receive, .send])
        XCTAssertTrue(machine.wantsReadable, "TLS reads: its records may carry alerts and tickets")
    }

    func testReceivingLoopsUntilTheSocketIsEmptyOrTheBufferFull() {
        var machine = plainFlow()
        XCTAssertEqual(machine.received(.moved(10)), [.receive])
        XCTAssertEqual(machine.received(.wouldBlock), [])
        XCTAssertTrue(machine.wantsReadable)
        XCTAssertEqual(machine.inboundFull(), [])
        XCTAssertFalse(machine.wantsReadable, "backpressure: no reading while the buffer is full")
        XCTAssertEqual(machine.socketReadable(), [], "a stray readiness event reads nothing")
        XCTAssertEqual(machine.inboundChanged(readerClosed: false), [.receive])
        XCTAssertTrue(machine.wantsReadable)
        XCTAssertEqual(machine.inboundChanged(readerClosed: false), [], "already reading")
    }

    func testSendingLoopsThenIdlesUntilTheUserWrites() {
        var machine = plainFlow()
        XCTAssertEqual(machine.sent(.moved(5)), [.send])
        XCTAssertEqual(machine.sent(.wouldBlock), [])
        XCTAssertTrue(machine.wantsWritable)
        XCTAssertEqual(machine.nothingToSend(outputClosed: false), [])
        XCTAssertFalse(machine.wantsWritable, "nothing to send: not watching writability")
        XCTAssertEqual(machine.socketWritable(), [])
        XCTAssertEqual(machine.outboundChanged(), [.send])
        XCTAssertTrue(machine.wantsWritable)
        XCTAssertEqual(machine.outboundChanged(), [], "already sending")
    }

    func testPeerCloseThenUserCloseReleasesOnce() {
        var machine = plainFlow()
        XCTAssertEqual(machine.received(.ended), [.endInbound])
        XCTAssertFalse(machine.wantsReadable)
        XCTAssertEqual(machine.nothingToSend(outputClosed: true), [.finishSending])
        XCTAssertEqual(machine.sendingFinished(.ended), [.release])
        XCTAssertTrue(machine.isClosed)
        XCTAssertFalse(machine.wantsReadable || machine.wantsWritable)
        XCTAssertEqual(machine.inboundChanged(readerClosed: true), [])
        XCTAssertEqual(machine.failed(lost), [], "nothing to fail after release")
    }

    func testUserClosesBothFirstThenTheHalfCloseReleases() {
        var machine = plainFlow()
        XCTAssertEqual(machine.inboundChanged(readerClosed: true), [])
        XCTAssertFalse(machine.wantsReadable)
        XCTAssertEqual(machine.nothingToSend(outputClosed: true), [.finishSending])
        XCTAssertEqual(machine.sendingFinished(.wouldBlock), [])
        XCTAssertTrue(machine.wantsWritable)
        XCTAssertEqual(machine.sendingFinished(.ended), [.release])
    }

    func testHalfCloseAloneKeepsReading() {
        var machine = plainFlow()
        _ = machine.nothingToSend(outputClosed: true)
        XCTAssertEqual(machine.sendingFinished(.ended), [])
        XCTAssertTrue(machine.wantsReadable, "the peer may still send after our half-close")
        XCTAssertFalse(machine.allowsDirectSend)
        XCTAssertEqual(machine.received(.ended), [.endInbound, .release])
    }

    func testAFailureEndsBothBuffersAndReleases() {
        var machine = plainFlow()
        XCTAssertEqual(
            machine.received(.failed(lost)), [.fail(lost, endsSetup: false, breaksConnection: true), .release])
        XCTAssertEqual(machine.received(.moved(1)), [])
        XCTAssertEqual(machine.sent(.moved(1)), [])
        XCTAssertFalse(machine.allowsDirectSend)
    }

    func testSendingIntoAClosedConnectionFails() {
        var machine = plainFlow()
        let actions = machine.sent(.ended)
        guard case .fail(let error, false, true) = actions.first, error.code == .connectionLost else {
            return XCTFail("\(actions)")
        }
        XCTAssertEqual(actions.last, .release)
    }

    func testDirectSendFailureAndNeedsReadable() {
        var machine = tlsFlow()
        XCTAssertTrue(machine.allowsDirectSend)
        XCTAssertEqual(machine.directSendNeedsReadable(), [])
        XCTAssertFalse(machine.allowsDirectSend, "bytes must wait behind the buffered ones")
        XCTAssertTrue(machine.wantsReadable)
        XCTAssertEqual(machine.socketReadable(), [.receive, .send])
        XCTAssertEqual(
            machine.directSendFailed(lost), [.fail(lost, endsSetup: false, breaksConnection: true), .release])
    }

    // MARK: TLS handshake and trust

    func testHandshakeWatchesOnlyWhatOpenSSLWants() {
        var machine = Machine()
        XCTAssertEqual(machine.start(secure: true), [.stepHandshake])
        XCTAssertFalse(machine.allowsDirectSend)
        XCTAssertEqual(machine.handshakeStepped(.wantRead), [])
        XCTAssertTrue(machine.wantsReadable)
        XCTAssertFalse(machine.wantsWritable)
        XCTAssertEqual(machine.socketReadable(), [.stepHandshake])
        XCTAssertEqual(machine.handshakeStepped(.wantWrite), [])
        XCTAssertFalse(machine.wantsReadable)
        XCTAssertTrue(machine.wantsWritable)
        XCTAssertEqual(machine.socketWritable(), [.stepHandshake])
        XCTAssertEqual(machine.handshakeStepped(.done), [.evaluateTrust])
        XCTAssertFalse(machine.wantsReadable || machine.wantsWritable, "nothing moves during the trust decision")
        XCTAssertEqual(machine.socketReadable(), [])
        XCTAssertEqual(
            machine.trustDecided(accepted: true, failure: .rejectedByEvaluator), [.reportReady, .receive, .send])
        XCTAssertEqual(machine.state, .flowing(.init(security: .tls, input: .reading, output: .sending)))
    }

    func testRefusedPeerFailsTheSetupOnly() {
        var machine = Machine()
        _ = machine.start(secure: true)
        _ = machine.handshakeStepped(.done)
        XCTAssertEqual(
            machine.trustDecided(accepted: false, failure: .noPeerCertificate),
            [.fail(.tls(.noPeerCertificate), endsSetup: true, breaksConnection: false), .release])
        XCTAssertEqual(machine.trustDecided(accepted: true, failure: .noPeerCertificate), [], "decided once")
    }

    func testHandshakeFailure() {
        var machine = Machine()
        _ = machine.start(secure: true)
        XCTAssertEqual(
            machine.handshakeStepped(.failed(.handshakeFailed("alert"))),
            [.fail(.tls(.handshakeFailed("alert")), endsSetup: true, breaksConnection: false), .release])
    }

    func testAbandonedHandshakeIsCancelled() {
        for progress: Machine.HandshakeProgress in [.wantRead, .wantWrite, .done] {
            var machine = Machine()
            _ = machine.start(secure: true)
            _ = machine.handshakeStepped(progress)
            XCTAssertEqual(
                machine.abandoned(), [.fail(.cancelled, endsSetup: true, breaksConnection: false), .release],
                "\(progress)")
        }
        var flowing = plainFlow()
        XCTAssertEqual(flowing.abandoned(), [], "a flowing connection finishes sending instead")
    }

    func testTLSWantsTheOtherDirectionWhileFlowing() {
        var machine = tlsFlow()
        XCTAssertEqual(machine.received(.needsOtherDirection), [])
        XCTAssertTrue(machine.wantsWritable)
        _ = machine.nothingToSend(outputClosed: false)
        XCTAssertTrue(machine.wantsWritable, "reading needs the socket writable")
        XCTAssertFalse(machine.wantsReadable)
        XCTAssertEqual(machine.socketWritable(), [.receive])
        XCTAssertTrue(machine.wantsReadable)
        XCTAssertEqual(machine.outboundChanged(), [.send])
        XCTAssertEqual(machine.sent(.needsOtherDirection), [])
        XCTAssertTrue(machine.wantsReadable)
        XCTAssertEqual(machine.socketReadable(), [.receive, .send])
    }

    // MARK: close_notify

    func testPeerCloseNotifyThenTCPEndIsTheEndOfData() {
        var machine = tlsFlow()
        XCTAssertEqual(machine.received(.ended), [.peekAtSocket])
        XCTAssertTrue(machine.wantsReadable)
        XCTAssertEqual(machine.peeked(.nothingYet), [])
        XCTAssertEqual(machine.socketReadable(), [.peekAtSocket])
        XCTAssertEqual(machine.peeked(.endOfStream), [.endInbound])
        XCTAssertFalse(machine.wantsReadable)
    }

    func testPlainBytesAfterThePeersCloseNotifyAreAProtocolError() {
        // Otherwise a peer could pin the connection: we would wait for a stopTLS that never comes.
        var machine = tlsFlow()
        _ = machine.received(.ended)
        let error = SocketStreamError.tls(.protocolError("the peer sent bytes in the clear after its close_notify"))
        XCTAssertEqual(machine.peeked(.data), [.fail(error, endsSetup: false, breaksConnection: true), .release])
    }

    func testPeerCloseNotifyThenOurStopTLSReturnsToPlainBytes() {
        var machine = tlsFlow()
        _ = machine.received(.ended)
        XCTAssertEqual(machine.peeked(.nothingYet), [])
        XCTAssertEqual(machine.stopTLS(), [.send])
        XCTAssertEqual(machine.nothingToSend(outputClosed: false), [.sendCloseNotify])
        XCTAssertEqual(machine.closeNotifySent(.ended), [.switchToPlain, .receive, .send])
        XCTAssertEqual(machine.state, .flowing(.init(security: .plain, input: .reading, output: .sending)))
    }

    func testTruncationIsAFailureNotAnEnd() {
        var machine = tlsFlow()
        let truncated = SocketStreamError.tls(.closedWithoutCloseNotify)
        XCTAssertEqual(
            machine.received(.failed(truncated)),
            [.fail(truncated, endsSetup: false, breaksConnection: true), .release])
    }

    // MARK: Upgrade

    func testUpgradeDrainsSendsThePrefaceThenShakesHands() {
        var machine = plainFlow()
        _ = machine.nothingToSend(outputClosed: false)
        XCTAssertEqual(machine.startTLS(), [.send])
        XCTAssertFalse(machine.wantsReadable, "bytes after the upgrade belong to TLS")
        XCTAssertFalse(machine.allowsDirectSend)
        XCTAssertEqual(machine.sent(.moved(3)), [.send])
        XCTAssertEqual(machine.nothingToSend(outputClosed: false), [.sendPreface])
        XCTAssertEqual(machine.prefaceSent(complete: false), [])
        XCTAssertTrue(machine.wantsWritable)
        XCTAssertEqual(machine.socketWritable(), [.send])
        XCTAssertEqual(machine.nothingToSend(outputClosed: false), [.sendPreface])
        XCTAssertEqual(machine.prefaceSent(complete: true), [.stepHandshake])
        XCTAssertEqual(machine.startTLS(), [.rejectChange("TLS is already on, or being switched")])
        XCTAssertEqual(machine.handshakeStepped(.done), [.evaluateTrust])
        XCTAssertEqual(
            machine.trustDecided(accepted: true, failure: .rejectedByEvaluator), [.reportReady, .receive, .send])
        guard case .flowing(let flow) = machine.state else { return XCTFail() }
        XCTAssertEqual(flow.security, .tls)
    }

    func testAFailedUpgradeBreaksTheConnection() {
        var machine = plainFlow()
        _ = machine.startTLS()
        _ = machine.nothingToSend(outputClosed: false)
        _ = machine.prefaceSent(complete: true)
        XCTAssertEqual(
            machine.handshakeStepped(.failed(.handshakeFailed("x"))),
            [.fail(.tls(.handshakeFailed("x")), endsSetup: true, breaksConnection: true), .release])
    }

    func testAFailureWhileDrainingForAnUpgradeEndsTheUpgrade() {
        var machine = plainFlow()
        _ = machine.startTLS()
        XCTAssertEqual(machine.sent(.failed(lost)), [.fail(lost, endsSetup: true, breaksConnection: true), .release])
    }

    func testUpgradeRefusals() {
        var tls = tlsFlow()
        XCTAssertEqual(tls.startTLS(), [.rejectChange("TLS is already on, or being switched")])
        var plain = plainFlow()
        XCTAssertEqual(plain.stopTLS(), [.rejectChange("TLS is not on, or being switched")])
        _ = plain.nothingToSend(outputClosed: true)
        _ = plain.sendingFinished(.ended)
        XCTAssertEqual(plain.startTLS(), [.rejectChange("the output is closed")])
        _ = plain.received(.ended)
        XCTAssertEqual(plain.startTLS(), [.rejectChange("the connection is closed")])
        var idle = Machine()
        XCTAssertEqual(idle.startTLS(), [.rejectChange("TLS is already on, or being switched")])
    }

    // MARK: Downgrade

    func testDowngradeOursFirstThenThePeers() {
        var machine = tlsFlow()
        XCTAssertEqual(machine.stopTLS(), [.send])
        XCTAssertFalse(machine.allowsDirectSend)
        XCTAssertEqual(machine.nothingToSend(outputClosed: false), [.sendCloseNotify])
        XCTAssertEqual(machine.closeNotifySent(.wouldBlock), [])
        XCTAssertEqual(machine.closeNotifySent(.needsOtherDirection), [])
        XCTAssertTrue(machine.wantsReadable)
        XCTAssertEqual(machine.socketReadable(), [.receive, .send])
        XCTAssertEqual(machine.nothingToSend(outputClosed: false), [.sendCloseNotify])
        XCTAssertEqual(machine.closeNotifySent(.ended), [.receive])
        XCTAssertFalse(machine.wantsWritable)
        XCTAssertTrue(machine.wantsReadable, "waiting for the peer's close_notify")
        XCTAssertEqual(machine.received(.moved(4)), [.receive], "TLS bytes before the peer's alert are data")
        XCTAssertEqual(machine.received(.ended), [.switchToPlain, .receive, .send])
        XCTAssertTrue(machine.allowsDirectSend)
    }

    func testDowngradeThePeersFirst() {
        var machine = tlsFlow()
        _ = machine.stopTLS()
        XCTAssertEqual(machine.received(.ended), [])
        XCTAssertFalse(machine.wantsReadable, "plain bytes may follow: not read until ours is out")
        XCTAssertEqual(machine.nothingToSend(outputClosed: false), [.sendCloseNotify])
        XCTAssertEqual(machine.closeNotifySent(.ended), [.switchToPlain, .receive, .send])
    }

    func testAFailedCloseNotifyFailsTheDowngrade() {
        var machine = tlsFlow()
        _ = machine.stopTLS()
        _ = machine.nothingToSend(outputClosed: false)
        XCTAssertEqual(
            machine.closeNotifySent(.failed(lost)), [.fail(lost, endsSetup: false, breaksConnection: true), .release])
    }

    // MARK: Closing both streams ends everything

    /// From every state a connection can be in, closing both streams while the peer says and
    /// does nothing (no handshake reply, no reads, no close) releases the connection.
    func testClosingBothStreamsReleasesFromEveryStateWithASilentPeer() {
        for (name, start) in reachableStates() where start.state != .idle {
            var machine = start
            // Five events' actions are piled up here, as the shell never does (it performs one
            // event's actions before the next): an outcome may find its action gone, which is
            // recorded, not asserted.
            machine.assertsUnexpectedEvents = false
            var work =
                machine.inboundChanged(readerClosed: true) + machine.abandoned() + machine.outboundChanged()
                + machine.socketReadable() + machine.socketWritable()
            var steps = 0
            while !work.isEmpty && steps < 200 {
                let action = work.removeFirst()
                steps += 1
                switch action {
                case .receive: work += machine.inboundChanged(readerClosed: true)  // the shell sees the closed reader
                case .send: work += machine.nothingToSend(outputClosed: true)
                case .finishSending: work += machine.sendingFinished(.ended)
                case .sendCloseNotify: work += machine.closeNotifySent(.wouldBlock)  // silent: never drains
                case .sendPreface: work += machine.prefaceSent(complete: false)
                case .stepHandshake: work += machine.handshakeStepped(.wantRead)
                case .peekAtSocket: work += machine.peeked(.nothingYet)
                default: break
                }
            }
            XCTAssertTrue(machine.isClosed, "\(name): still \(machine.state)")
        }
    }

    // MARK: Every state × event

    /// States reached by the paths above (and a few more), each named.
    func reachableStates() -> [(String, Machine)] {
        var reachable: [(String, Machine)] = [("idle", Machine())]
        func add(_ name: String, _ steps: (inout Machine) -> Void) {
            var machine = Machine()
            steps(&machine)
            reachable.append((name, machine))
        }
        add("handshake wants read") {
            _ = $0.start(secure: true); _ = $0.handshakeStepped(.wantRead)
        }
        add("handshake wants write") {
            _ = $0.start(secure: true); _ = $0.handshakeStepped(.wantWrite)
        }
        add("evaluating") {
            _ = $0.start(secure: true); _ = $0.handshakeStepped(.done)
        }
        add("plain") { _ = $0.start(secure: false) }
        add("plain, full") {
            _ = $0.start(secure: false); _ = $0.inboundFull()
        }
        add("plain, idle") {
            _ = $0.start(secure: false); _ = $0.nothingToSend(outputClosed: false)
        }
        add("plain, peer ended") {
            _ = $0.start(secure: false); _ = $0.received(.ended)
        }
        add("plain, half-closed") {
            _ = $0.start(secure: false); _ = $0.nothingToSend(outputClosed: true); _ = $0.sendingFinished(.ended)
        }
        add("upgrading") {
            _ = $0.start(secure: false); _ = $0.startTLS()
        }
        add("upgrade handshake") {
            _ = $0.start(secure: false); _ = $0.startTLS(); _ = $0.prefaceSent(complete: true)
        }
        add("tls") { $0 = self.tlsFlow() }
        add("tls, read needs write") {
            $0 = self.tlsFlow(); _ = $0.received(.needsOtherDirection)
        }
        add("tls, write needs read") {
            $0 = self.tlsFlow(); _ = $0.sent(.needsOtherDirection)
        }
        add("tls, peer close_notify") {
            $0 = self.tlsFlow(); _ = $0.received(.ended)
        }
        add("downgrading") {
            $0 = self.tlsFlow(); _ = $0.stopTLS()
        }
        add("downgrade, ours sent") {
            $0 = self.tlsFlow(); _ = $0.stopTLS(); _ = $0.closeNotifySent(.ended)
        }
        add("evaluating an upgrade") {
            _ = $0.start(secure: false); _ = $0.startTLS(); _ = $0.prefaceSent(complete: true);
            _ = $0.handshakeStepped(.done)
        }
        add("downgrade, peer's first") {
            $0 = self.tlsFlow(); _ = $0.stopTLS(); _ = $0.received(.ended)
        }
        add("closed") {
            _ = $0.start(secure: false); _ = $0.failed(self.lost)
        }

        return reachable
    }

    /// An outcome of an action the machine never asked for in this state is a bug in the
    /// shell: recorded (and asserted in debug builds); the same outcome after the release, a
    /// stray readiness and the user's hints are late, not bugs.
    func testAnOutcomeNobodyAskedForIsFlaggedButALateOneIsNot() {
        var idle = Machine()
        idle.assertsUnexpectedEvents = false
        XCTAssertEqual(idle.sent(.moved(1)), [])
        XCTAssertEqual(idle.unexpectedEvent?.hasPrefix("sent in "), true, "\(idle.unexpectedEvent ?? "nil")")
        var shaking = Machine()
        _ = shaking.start(secure: true)
        shaking.assertsUnexpectedEvents = false
        XCTAssertEqual(shaking.received(.moved(1)), [])
        XCTAssertEqual(shaking.unexpectedEvent?.hasPrefix("received in "), true)

        var released = plainFlow()
        _ = released.failed(lost)
        XCTAssertEqual(released.sent(.moved(1)), [])
        XCTAssertEqual(released.handshakeStepped(.done), [])
        XCTAssertEqual(released.socketReadable(), [])
        XCTAssertNil(released.unexpectedEvent)
        // A second send queued in the same step finds the output idle: late, not a bug.
        var twice = plainFlow()
        XCTAssertEqual(twice.nothingToSend(outputClosed: false), [])
        XCTAssertEqual(twice.nothingToSend(outputClosed: false), [])
        XCTAssertEqual(twice.sent(.moved(1)), [])
        XCTAssertNil(twice.unexpectedEvent)
        var hinted = plainFlow()
        XCTAssertEqual(hinted.outboundChanged(), [], "already sending")
        XCTAssertEqual(hinted.readingWanted(), [], "already reading")
        XCTAssertEqual(hinted.inboundChanged(readerClosed: false), [], "the buffer was not full")
        XCTAssertNil(hinted.unexpectedEvent)
    }

    /// Every reachable state against every event that may arrive in any state.
    func testEveryReachableStateAnswersEveryEventSafely() {
        let reachable = reachableStates()
        let events: [(String, (inout Machine) -> [Machine.Action])] = [
            ("readable", { $0.socketReadable() }), ("writable", { $0.socketWritable() }),
            ("received bytes", { $0.received(.moved(1)) }), ("received end", { $0.received(.ended) }),
            ("received failure", { $0.received(.failed(self.lost)) }), ("full", { $0.inboundFull() }),
            ("sent", { $0.sent(.moved(1)) }), ("nothing to send", { $0.nothingToSend(outputClosed: false) }),
            ("output closed", { $0.nothingToSend(outputClosed: true) }),
            ("user read", { $0.inboundChanged(readerClosed: false) }),
            ("user closed input", { $0.inboundChanged(readerClosed: true) }), ("user wrote", { $0.outboundChanged() }),
            ("failed", { $0.failed(self.lost) }), ("abandoned", { $0.abandoned() }),
            ("startTLS", { $0.startTLS() }), ("stopTLS", { $0.stopTLS() }),
            ("handshake done", { $0.handshakeStepped(.done) }),
            ("trusted", { $0.trustDecided(accepted: true, failure: .rejectedByEvaluator) }),
            ("peeked end", { $0.peeked(.endOfStream) }), ("close_notify sent", { $0.closeNotifySent(.ended) }),
            ("finished sending", { $0.sendingFinished(.ended) }), ("preface sent", { $0.prefaceSent(complete: true) }),
            ("peeked data", { $0.peeked(.data) }), ("peeked nothing", { $0.peeked(.nothingYet) }),
            ("refused", { $0.trustDecided(accepted: false, failure: .noPeerCertificate) }),
            ("handshake failed", { $0.handshakeStepped(.failed(.handshakeFailed("x"))) }),
            ("direct send needs read", { $0.directSendNeedsReadable() }),
            ("direct send failed", { $0.directSendFailed(self.lost) }),
            ("half-close blocked", { $0.sendingFinished(.wouldBlock) }),
            ("preface incomplete", { $0.prefaceSent(complete: false) }),
        ]
        for (stateName, start) in reachable {
            for (eventName, event) in events {
                var machine = start
                machine.assertsUnexpectedEvents = false
                let actions = event(&machine)
                let label = "\(stateName) + \(eventName)"
                // After the release every event is late: nothing is flagged.
                if start.isClosed { XCTAssertNil(machine.unexpectedEvent, label) }
                // Release comes last, once, and only on the way to closed.
                let releases = actions.filter { $0 == .release }.count
                XCTAssertLessThanOrEqual(releases, 1, label)
                if releases == 1 {
                    XCTAssertEqual(actions.last, .release, label)
                    XCTAssertTrue(machine.isClosed, label)
                }
                if start.isClosed {
                    XCTAssertTrue(
                        actions.allSatisfy { if case .rejectChange = $0 { true } else { false } },
                        "\(label): \(actions)")
                }
                // A failure is always followed by release (unless nothing had started).
                if actions.contains(where: { if case .fail = $0 { true } else { false } }) {
                    XCTAssertTrue(machine.isClosed, label)
                    if start.state != .idle { XCTAssertEqual(actions.last, .release, label) }
                }
                if machine.isClosed {
                    XCTAssertFalse(machine.wantsReadable || machine.wantsWritable || machine.allowsDirectSend, label)
                }
                // Whatever the state, a failure afterwards leaves nothing watched.
                _ = machine.failed(lost)
                XCTAssertTrue(machine.isClosed, label)
            }
        }
    }
}

/// Whole exchanges: the machine's actions performed against a scripted `ByteTransport` and two
/// in-memory buffers, as the pump's shell performs them against a socket.
final class SocketPumpConversationTests: SalutTestCase {
    /// A transport that hands out scripted receive outcomes and takes sends up to a window.
    final class ScriptedTransport: ByteTransport {
        var incoming: [TransferOutcome] = []
        var sendWindow = Int.max
        var sentBytes: [UInt8] = []
        var finished = false

        func receive(into buffer: UnsafeMutableRawPointer, count: Int) -> TransferOutcome {
            guard !incoming.isEmpty else { return .wouldBlock }
            let next = incoming.removeFirst()
            if case .moved(let n) = next, n > count {
                incoming.insert(.moved(n - count), at: 0)  // the rest stays in the socket
                return .moved(count)
            }
            return next
        }
        func send(from buffer: UnsafeRawPointer, count: Int) -> TransferOutcome {
            let n = min(count, sendWindow)
            guard n > 0 else { return .wouldBlock }
            sentBytes += UnsafeRawBufferPointer(start: buffer, count: n)
            sendWindow -= n
            return .moved(n)
        }
        func finishSending() -> TransferOutcome { finished = true; return .ended }
    }

    struct Conversation {
        var machine = SocketPump.StateMachine()
        let transport = ScriptedTransport()
        var inboundRoom = 8
        var delivered = 0
        var outbound: [UInt8] = []
        var outputClosed = false
        var log: [SocketPump.StateMachine.Action] = []

        mutating func run(_ actions: [SocketPump.StateMachine.Action]) {
            var work = actions[...]
            while let action = work.popFirst() {
                log.append(action)
                var more: [SocketPump.StateMachine.Action] = []
                switch action {
                case .receive:
                    if inboundRoom == 0 { more = machine.inboundFull(); break }
                    var scratch = [UInt8](repeating: 0, count: inboundRoom)
                    let outcome = scratch.withUnsafeMutableBytes {
                        transport.receive(into: $0.baseAddress!, count: $0.count)
                    }
                    if case .moved(let n) = outcome { inboundRoom -= n; delivered += n }
                    more = machine.received(outcome)
                case .send:
                    if outbound.isEmpty { more = machine.nothingToSend(outputClosed: outputClosed); break }
                    let outcome = outbound.withUnsafeBytes { transport.send(from: $0.baseAddress!, count: $0.count) }
                    if case .moved(let n) = outcome { outbound.removeFirst(n) }
                    more = machine.sent(outcome)
                case .finishSending:
                    more = machine.sendingFinished(transport.finishSending())
                default:
                    break
                }
                work = more[...] + work
            }
        }
    }

    func testBytesFlowBothWaysWithBackpressureAndEndInOrder() {
        var talk = Conversation()
        talk.transport.incoming = [.moved(5), .moved(5), .wouldBlock, .moved(2), .ended]
        talk.outbound = Array("hello".utf8)
        talk.transport.sendWindow = 3
        talk.run(talk.machine.start(secure: false))
        XCTAssertEqual(talk.delivered, 0, "nothing is read before the socket says it is readable")
        talk.run(talk.machine.socketReadable())  // the first readiness the registration reports
        XCTAssertEqual(talk.delivered, 8, "as much as the 8-byte buffer holds")
        XCTAssertFalse(talk.machine.wantsReadable, "the buffer is full: reading paused")
        XCTAssertEqual(talk.transport.sentBytes, Array("hel".utf8))
        XCTAssertTrue(talk.machine.wantsWritable, "the socket is full: waiting to send the rest")

        talk.transport.sendWindow = .max
        talk.run(talk.machine.socketWritable())
        XCTAssertEqual(talk.transport.sentBytes, Array("hello".utf8))
        XCTAssertFalse(talk.machine.wantsWritable)

        talk.inboundRoom = 8  // the user read everything
        talk.run(talk.machine.inboundChanged(readerClosed: false))
        XCTAssertEqual(talk.delivered, 10, "the rest of the second piece, then the socket was empty")
        XCTAssertTrue(talk.machine.wantsReadable)
        XCTAssertFalse(talk.log.contains(.endInbound))
        talk.run(talk.machine.socketReadable())
        XCTAssertEqual(talk.delivered, 12)
        XCTAssertTrue(talk.log.contains(.endInbound))
        XCTAssertFalse(talk.machine.isClosed, "our direction is still open")

        talk.outputClosed = true
        talk.run(talk.machine.outboundChanged())
        XCTAssertTrue(talk.transport.finished)
        XCTAssertEqual(talk.log.last, .release)
        XCTAssertTrue(talk.machine.isClosed)
    }
}
