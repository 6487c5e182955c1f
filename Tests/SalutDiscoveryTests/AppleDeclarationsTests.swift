import Foundation
import Logging
import Salut
import SalutStreams
import SalutTestSupport
import XCTest

/// Apple's deprecated TXT spellings, reached through a protocol so that testing them does not
/// itself use deprecated API (the build has no warnings).
private protocol LegacyTXTSpellings {
    func protocolSpecificInformation() -> String?
    func setProtocolSpecificInformation(_ specificInformation: String?)
}
extension NetService: LegacyTXTSpellings {}

/// Written the way Apple-platform code is: delegate classes, subclasses, run loops.
final class AppleDeclarationsTests: XCTestCase {
    /// A delegate class hierarchy as apps build them: the base handles publishing, a subclass
    /// adds a method the base never declared.
    class PublishingDelegate: NetServiceDelegateObject, @unchecked Sendable {
        // @unchecked: used on the main run loop only, read after the expectations.
        var published: XCTestExpectation?
        override func netServiceDidPublish(_ sender: NetService) { published?.fulfill() }
    }
    final class AnnouncingDelegate: PublishingDelegate, @unchecked Sendable {
        // @unchecked: as its base; `heardWillPublish` is set on the main run loop, read after the expectation.
        var heardWillPublish = false
        override func netServiceWillPublish(_ sender: NetService) { heardWillPublish = true }
    }

    func testASubclassMethodTheBaseDelegateLeftOutIsCalled() {
        let delegate = AnnouncingDelegate()
        delegate.published = expectation(description: "published")
        let service = NetService(domain: "local.", type: uniqueType("d") + ".", name: "Subclassed Delegate", port: 4242)
        service.delegate = delegate
        service.publish()
        defer { service.stop() }
        wait(for: [delegate.published!], timeout: 10)
        XCTAssertTrue(delegate.heardWillPublish, "the subclass's own method was called")
    }

    /// `type` and `domain` are `open` as Apple declares them; an override is what is published.
    final class PrinterService: NetService, @unchecked Sendable {
        // @unchecked: adds no stored state (a static constant and overrides) to NetService's locked state.
        static let printerType = uniqueType("p") + "."
        override var type: String { Self.printerType }
        override var domain: String { "local." }
        init(name: String) { super.init(domain: "", type: "_unused._tcp.", name: name, port: 631) }
    }

    func testTypeAndDomainCanBeOverriddenAsOnApple() throws {
        final class Delegate: NetServiceDelegateObject, @unchecked Sendable {
            // @unchecked: its only state is a constant expectation, which is thread-safe.
            let published: XCTestExpectation
            init(_ published: XCTestExpectation) { self.published = published }
            override func netServiceDidPublish(_ sender: NetService) { published.fulfill() }
        }
        let service = PrinterService(name: "OverriddenType")
        let delegate = Delegate(expectation(description: "published"))
        service.delegate = delegate
        service.publish()
        defer { service.stop() }
        wait(for: [delegate.published], timeout: 10)
        let browse = try Foreign(["avahi-browse", "-pt", String(PrinterService.printerType.dropLast())])
        XCTAssertTrue(browse.waitForOutput(containing: "OverriddenType", seconds: 10), browse.output)
        browse.stop()
    }

    func testGetInputStreamEndsTheServicesDelegateCalls() {
        final class Counter: NetServiceDelegateObject, @unchecked Sendable {
            // @unchecked: set up before the services start, then used on the main run loop (the test's) only.
            var calls = 0
            var onNotResolve: (() -> Void)?
            override func netServiceWillResolve(_ sender: NetService) { calls += 1 }
            override func netService(_ sender: NetService, didNotResolve errorDict: [String: NSNumber]) {
                calls += 1
                onNotResolve?()
            }
        }
        let name = "Nobody Here \(UInt32.random(in: 0..<UInt32.max))"
        let quiet = NetService(domain: "local.", type: uniqueType("g") + ".", name: name)
        let control = NetService(domain: "local.", type: uniqueType("g") + ".", name: name)
        let silenced = Counter(), heard = Counter()
        quiet.delegate = silenced
        control.delegate = heard
        let controlDone = expectation(description: "the control service's attempt ended")
        heard.onNotResolve = { controlDone.fulfill() }
        // Both attempts end at once; the quiet service's calls are queued before the control's.
        quiet.resolve(withTimeout: 0)
        var input: InputStream?, output: OutputStream?
        XCTAssertTrue(quiet.getInputStream(&input, outputStream: &output))
        control.resolve(withTimeout: 0)
        wait(for: [controlDone], timeout: 10)
        XCTAssertEqual(heard.calls, 2, "willResolve and didNotResolve reach an ordinary service")
        XCTAssertEqual(silenced.calls, 0, "after getInputStream, not even calls already queued arrive")
    }

    func testProtocolSpecificInformationIsTheTXTRecordAsOneString() {
        let netService = NetService(domain: "local.", type: "_x._tcp.", name: "TXT", port: 1)
        let service: any LegacyTXTSpellings = netService
        service.setProtocolSpecificInformation("txtvers=1\u{1}name=Salut\u{1}flag")
        XCTAssertEqual(
            NetService.dictionary(fromTXTRecord: netService.txtRecordData()!),
            ["txtvers": Data("1".utf8), "name": Data("Salut".utf8), "flag": Data()])
        XCTAssertEqual(service.protocolSpecificInformation(), "txtvers=1\u{1}name=Salut\u{1}flag")
        service.setProtocolSpecificInformation(String(repeating: "x", count: 256))
        XCTAssertEqual(
            service.protocolSpecificInformation(), "txtvers=1\u{1}name=Salut\u{1}flag",
            "an entry over 255 bytes changes nothing")
        service.setProtocolSpecificInformation(nil)
        XCTAssertNil(service.protocolSpecificInformation())
    }

    func testALongServiceTypeIsTakenOnLocalAndLoggedAsAWarning() {
        let captured = CapturedLog()
        let previous = SalutLogging.logger
        SalutLogging.logger = Logger(label: "test") { _ in captured }
        defer { SalutLogging.logger = previous }
        final class Delegate: NetServiceDelegateObject, @unchecked Sendable {
            // @unchecked: its only state is a constant expectation, which is thread-safe.
            let published: XCTestExpectation
            init(_ published: XCTestExpectation) { self.published = published }
            override func netServiceDidPublish(_ sender: NetService) { published.fulfill() }
        }
        let type = "_salutwarnlongtype\(UInt32.random(in: 100_000...999_999))._tcp."
        let service = NetService(domain: "local.", type: type, name: "Warned", port: 4242)
        let delegate = Delegate(expectation(description: "published"))
        service.delegate = delegate
        service.publish()
        defer { service.stop() }
        wait(for: [delegate.published], timeout: 10)
        let warnings = captured.messages.filter { $0.level == .warning }
        XCTAssertTrue(
            warnings.contains { $0.text.contains(String(type.dropLast())) && $0.text.contains("RFC 6335") },
            "\(captured.messages)")
    }
}

/// A log handler that keeps what it is given (for tests of what the library logs).
final class CapturedLog: LogHandler, @unchecked Sendable {
    // @unchecked: `stored` is a `Locked` box; the handler's own settings are set once.
    private let stored = Locked<[(level: Logger.Level, text: String)]>([])
    var logLevel: Logger.Level = .trace
    var metadata: Logger.Metadata = [:]
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }
    var messages: [(level: Logger.Level, text: String)] { stored.value }
    func log(event: LogEvent) {
        stored.withLock { $0.append((event.level, event.message.description)) }
    }
}
