import SalutStreams
import SalutTestSupport
import XCTest

@testable import SalutDiscovery

/// Which datagrams a one-shot query takes as its answer, without I/O: anything from the LAN may
/// arrive on its port.
final class OneShotQueryTests: XCTestCase {
    private let asked = try! DNSName(parsing: "Printer._ipp._tcp.local")
    private var query: OneShotQuery {
        OneShotQuery(question: DNSQuestion(name: asked, type: DNSType.service), interfaceIndex: 1, overIPv6: false)
    }

    private func response(
        id: UInt16 = 7, isResponse: Bool = true, rcode: UInt16 = 0, records: [DNSRecord], additional: Bool = false
    ) -> [UInt8] {
        var message = DNSMessage(id: id, opcode: DNSMessage.query)
        if isResponse { message.flags |= 0x8400 }
        message.flags |= rcode
        if additional { message.additionals = records } else { message.answers = records }
        return message.encoded()
    }

    private func service(_ owner: DNSName, ttl: UInt32 = 120) -> DNSRecord {
        .service(owner, port: 631, target: try! DNSName(parsing: "host.local"), ttl: ttl)
    }

    func testAnAnswerIsALiveRecordOfTheNameFromTheMDNSPortWithTheQuerysID() throws {
        XCTAssertTrue(query.isAnswer(response(records: [service(asked)]), id: 7, sourcePort: 5353))
        XCTAssertTrue(query.isAnswer(response(records: [service(asked)], additional: true), id: 7, sourcePort: 5353))
        let otherCase = try DNSName(parsing: "PRINTER._IPP._tcp.local")
        XCTAssertTrue(query.isAnswer(response(records: [service(otherCase)]), id: 7, sourcePort: 5353))
        var flushed = service(asked)
        flushed.recordClass |= 0x8000  // the cache-flush bit
        XCTAssertTrue(query.isAnswer(response(records: [flushed]), id: 7, sourcePort: 5353))
    }

    func testEverythingElseOnThePortIsDropped() throws {
        let good = response(records: [service(asked)])
        XCTAssertFalse(query.isAnswer(good, id: 8, sourcePort: 5353), "another query's ID")
        XCTAssertFalse(query.isAnswer(good, id: 7, sourcePort: 40_000), "not from the mDNS port")
        XCTAssertFalse(query.isAnswer(response(isResponse: false, records: [service(asked)]), id: 7, sourcePort: 5353))
        XCTAssertFalse(query.isAnswer(response(rcode: 3, records: [service(asked)]), id: 7, sourcePort: 5353))
        XCTAssertFalse(
            query.isAnswer(response(records: [service(asked, ttl: 0)]), id: 7, sourcePort: 5353), "a goodbye")
        let other = try DNSName(parsing: "Scanner._ipp._tcp.local")
        XCTAssertFalse(query.isAnswer(response(records: [service(other)]), id: 7, sourcePort: 5353))
        let text = DNSRecord.text(asked, strings: [Array("a=b".utf8)], ttl: 120)
        XCTAssertFalse(query.isAnswer(response(records: [text]), id: 7, sourcePort: 5353), "not the asked type")
        XCTAssertFalse(query.isAnswer(Array(good.prefix(20)), id: 7, sourcePort: 5353), "cut short")
        XCTAssertFalse(query.isAnswer([], id: 7, sourcePort: 5353))
        XCTAssertFalse(query.isAnswer([UInt8](repeating: 0xC0, count: 600), id: 0xC0C0, sourcePort: 5353))
    }

    /// A caller that stops waiting ends its query at once: the answer is "no answer" (false,
    /// not a hang for the 100 attempts asked) and the query's socket is closed.
    func testACancelledQueryEndsAtOnceAndClosesItsSocket() throws {
        func openDescriptors() -> Int {
            (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd"))?.count ?? -1
        }
        /// Starts a query nobody answers, cancels it once its socket is open, and says how it ended.
        func askAndCancel() throws -> String? {
            let before = openDescriptors()
            let nobody = try DNSName(parsing: "Nobody \(UUID().uuidString.prefix(8))._ipp._tcp.local")
            var silent = OneShotQuery(
                question: DNSQuestion(name: nobody, type: DNSType.service), interfaceIndex: 1, overIPv6: false)
            silent.attempts = 100
            silent.interval = .seconds(1)
            let outcome = Locked<String?>(nil)
            let asking = Task {
                let said: String
                do { said = "answered: \(try await silent.isAnswered())" } catch { said = "threw \(error)" }
                outcome.withLock { $0 = said }
            }
            // The query is under way once its socket is open.
            XCTAssertTrue(eventually(timeout: 5) { openDescriptors() > before }, "the query never opened its socket")
            asking.cancel()
            XCTAssertTrue(eventually(timeout: 10) { outcome.withLock { $0 } != nil }, "a cancelled query kept waiting")
            return outcome.withLock { $0 }
        }
        // A first query, so that what the dispatch sources keep open for good is open already.
        XCTAssertEqual(try askAndCancel(), "answered: false", "a cancelled query has no answer")
        let before = openDescriptors()
        XCTAssertEqual(try askAndCancel(), "answered: false", "a cancelled query has no answer")
        XCTAssertTrue(eventually(timeout: 5) { openDescriptors() <= before }, "the query's socket stayed open")
    }
}
