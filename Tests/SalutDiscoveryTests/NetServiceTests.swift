import Foundation
import Glibc
import Salut
import SalutTestSupport
import XCTest

/// Records what a NetService's delegate hears and fulfils expectations as events arrive.
final class ServiceRecorder: NSObject, NetServiceDelegate, @unchecked Sendable {
    // @unchecked: touched only on the main thread (delegate calls arrive on the main run loop).
    var events: [String] = []
    var errors: [Int] = []
    var txtUpdates: [Data] = []
    var threads: [Bool] = []
    var expectations: [String: XCTestExpectation] = [:]

    func expect(_ event: String, _ test: XCTestCase) -> XCTestExpectation {
        let e = test.expectation(description: event)
        e.assertForOverFulfill = false
        expectations[event] = e
        return e
    }

    private func record(_ event: String) {
        events.append(event)
        threads.append(Thread.isMainThread)
        expectations[event]?.fulfill()
    }

    func netServiceWillPublish(_ sender: NetService) { record("willPublish") }
    func netServiceDidPublish(_ sender: NetService) { record("didPublish") }
    func netService(_ sender: NetService, didNotPublish errorDict: [String: NSNumber]) {
        errors.append(errorDict[NetService.errorCode]?.intValue ?? 0)
        record("didNotPublish")
    }
    func netServiceWillResolve(_ sender: NetService) { record("willResolve") }
    func netServiceDidResolveAddress(_ sender: NetService) { record("didResolve") }
    func netService(_ sender: NetService, didNotResolve errorDict: [String: NSNumber]) {
        errors.append(errorDict[NetService.errorCode]?.intValue ?? 0)
        record("didNotResolve")
    }
    func netServiceDidStop(_ sender: NetService) { record("didStop") }
    func netService(_ sender: NetService, didUpdateTXTRecord data: Data) {
        txtUpdates.append(data)
        record("didUpdateTXT")
    }
}

/// Records what a NetServiceBrowser's delegate hears.
final class BrowserRecorder: NSObject, NetServiceBrowserDelegate, @unchecked Sendable {
    // @unchecked: touched only on the thread of the run loop the browser is scheduled in.
    var found: [NetService] = []
    var removed: [NetService] = []
    var domains: [String] = []
    var moreComing: [Bool] = []
    var errors: [Int] = []
    var onFind: ((NetService) -> Void)?
    var onRemove: ((NetService) -> Void)?
    var onDomain: ((String) -> Void)?
    var onError: (() -> Void)?

    func netServiceBrowser(_ browser: NetServiceBrowser, didFind service: NetService, moreComing: Bool) {
        found.append(service)
        self.moreComing.append(moreComing)
        onFind?(service)
    }
    func netServiceBrowser(_ browser: NetServiceBrowser, didRemove service: NetService, moreComing: Bool) {
        removed.append(service)
        onRemove?(service)
    }
    func netServiceBrowser(_ browser: NetServiceBrowser, didFindDomain domainString: String, moreComing: Bool) {
        domains.append(domainString)
        onDomain?(domainString)
    }
    func netServiceBrowser(_ browser: NetServiceBrowser, didNotSearch errorDict: [String: NSNumber]) {
        errors.append(errorDict[NetService.errorCode]?.intValue ?? 0)
        onError?()
    }
}

final class NetServiceTests: XCTestCase {
    func testPublishBrowseResolveStopLikeOnMacOS() throws {
        let type = uniqueType() + "."
        let service = NetService(domain: "", type: type, name: "Apple Style", port: 8123)
        XCTAssertTrue(service.setTXTRecord(NetService.data(fromTXTRecord: ["k": Data("v".utf8)])))
        let recorder = ServiceRecorder()
        service.delegate = recorder
        let published = recorder.expect("didPublish", self)
        service.publish()
        wait(for: [published], timeout: 10)
        XCTAssertEqual(recorder.events.prefix(2), ["willPublish", "didPublish"])
        XCTAssertEqual(service.name, "Apple Style")
        XCTAssertTrue(recorder.threads.allSatisfy { $0 }, "delegate calls arrive on the main thread")

        let browser = NetServiceBrowser()
        let browsing = BrowserRecorder()
        browser.delegate = browsing
        let foundIt = expectation(description: "found")
        browsing.onFind = { if $0.name == "Apple Style" { foundIt.fulfill() } }
        browser.searchForServices(ofType: type, inDomain: "local.")
        wait(for: [foundIt], timeout: 10)
        let seen = try XCTUnwrap(browsing.found.first { $0.name == "Apple Style" })
        XCTAssertEqual(seen.type, type)
        XCTAssertEqual(seen.domain, "local.")
        XCTAssertEqual(browsing.moreComing.last, false)

        let resolver = ServiceRecorder()
        seen.delegate = resolver
        let resolvedIt = resolver.expect("didResolve", self)
        seen.resolve(withTimeout: 5)
        wait(for: [resolvedIt], timeout: 10)
        XCTAssertEqual(seen.port, 8123)
        XCTAssertTrue(seen.hostName?.hasSuffix(".local.") ?? false, seen.hostName ?? "nil")
        let addresses = try XCTUnwrap(seen.addresses).compactMap(SocketAddress.init)
        XCTAssertTrue(addresses.contains { $0.host == "127.0.0.1" && $0.port == 8123 }, "\(addresses)")
        let txt = NetService.dictionary(fromTXTRecord: try XCTUnwrap(seen.txtRecordData()))
        XCTAssertEqual(txt["k"], Data("v".utf8))

        let removedIt = expectation(description: "removed")
        browsing.onRemove = { if $0 === seen { removedIt.fulfill() } }
        let stopped = recorder.expect("didStop", self)
        service.stop()
        wait(for: [stopped, removedIt], timeout: 10)
        browser.stop()
        seen.stop()
    }

    func testCollisionWithAndWithoutAutoRename() {
        let type = uniqueType() + "."
        let first = NetService(domain: "", type: type, name: "Same Name", port: 1)
        let r1 = ServiceRecorder()
        first.delegate = r1
        let p1 = r1.expect("didPublish", self)
        first.publish()
        wait(for: [p1], timeout: 10)

        let renamed = NetService(domain: "", type: type, name: "Same Name", port: 2)
        let r2 = ServiceRecorder()
        renamed.delegate = r2
        let p2 = r2.expect("didPublish", self)
        renamed.publish()
        wait(for: [p2], timeout: 10)
        XCTAssertNotEqual(renamed.name, "Same Name", "didPublish reports the final name")
        XCTAssertTrue(renamed.name.hasPrefix("Same Name"), renamed.name)

        let strict = NetService(domain: "", type: type, name: "Same Name", port: 3)
        let r3 = ServiceRecorder()
        strict.delegate = r3
        let failed = r3.expect("didNotPublish", self)
        strict.publish(options: .noAutoRename)
        wait(for: [failed], timeout: 10)
        XCTAssertEqual(r3.errors, [NetService.ErrorCode.collisionError.rawValue])
        XCTAssertEqual(strict.lastError, .collision(name: "Same Name"))
        first.stop()
        renamed.stop()
    }

    func testResolveTimesOutWithTimeoutError() {
        let missing = NetService(domain: "local.", type: uniqueType() + ".", name: "Not There")
        let recorder = ServiceRecorder()
        missing.delegate = recorder
        let failed = recorder.expect("didNotResolve", self)
        missing.resolve(withTimeout: 1)
        wait(for: [failed], timeout: 5)
        XCTAssertEqual(recorder.events, ["willResolve", "didNotResolve"])
        XCTAssertEqual(recorder.errors, [NetService.ErrorCode.timeoutError.rawValue])
        XCTAssertEqual(missing.port, -1)
        XCTAssertNil(missing.addresses)
    }

    func testLiveTXTUpdateReachesAMonitor() {
        let type = uniqueType() + "."
        let service = NetService(domain: "", type: type, name: "Live TXT", port: 5)
        service.setTXTRecord(NetService.data(fromTXTRecord: ["state": Data("idle".utf8)]))
        let publisher = ServiceRecorder()
        service.delegate = publisher
        let published = publisher.expect("didPublish", self)
        service.publish()
        wait(for: [published], timeout: 10)

        let watcher = NetService(domain: "local.", type: type, name: "Live TXT")
        let monitor = ServiceRecorder()
        watcher.delegate = monitor
        let first = monitor.expect("didUpdateTXT", self)
        watcher.startMonitoring()
        wait(for: [first], timeout: 10)
        XCTAssertEqual(NetService.dictionary(fromTXTRecord: monitor.txtUpdates[0])["state"], Data("idle".utf8))

        let second = monitor.expect("didUpdateTXT", self)
        // A fresh expectation for the second update: wait until two have arrived.
        second.expectedFulfillmentCount = 1
        monitor.txtUpdates.removeAll()
        service.setTXTRecord(NetService.data(fromTXTRecord: ["state": Data("busy".utf8)]))
        wait(for: [second], timeout: 10)
        XCTAssertEqual(
            monitor.txtUpdates.last.map { NetService.dictionary(fromTXTRecord: $0)["state"] }, Data("busy".utf8))
        watcher.stopMonitoring()
        service.stop()
    }

    func testBadInputIsReportedAsBadArgument() {
        let badType = NetService(domain: "", type: "no-underscore._tcp.", name: "x", port: 1)
        let r1 = ServiceRecorder()
        badType.delegate = r1
        let e1 = r1.expect("didNotPublish", self)
        badType.publish()
        let badPort = NetService(domain: "", type: "_ok._tcp.", name: "x", port: 70000)
        let r2 = ServiceRecorder()
        badPort.delegate = r2
        let e2 = r2.expect("didNotPublish", self)
        badPort.publish()
        let browser = NetServiceBrowser()
        let b = BrowserRecorder()
        browser.delegate = b
        let e3 = expectation(description: "didNotSearch")
        b.onError = { e3.fulfill() }
        browser.searchForServices(ofType: "_http._tcp.", inDomain: "bad..domain.")
        wait(for: [e1, e2, e3], timeout: 5)
        let bad = NetService.ErrorCode.badArgumentError.rawValue
        XCTAssertEqual(r1.errors, [bad])
        XCTAssertEqual(r2.errors, [bad])
        XCTAssertEqual(b.errors, [bad])
        XCTAssertFalse(badType.setTXTRecord(Data([5, 0x61])), "a string running past the end is refused")
    }

    func testBrowsableDomainsStartWithLocal() {
        let browser = NetServiceBrowser()
        let b = BrowserRecorder()
        browser.delegate = b
        let found = expectation(description: "local.")
        b.onDomain = { if $0 == "local." { found.fulfill() } }
        browser.searchForBrowsableDomains()
        wait(for: [found], timeout: 5)
        XCTAssertEqual(b.domains.first, "local.")
        browser.stop()
    }

    func testServiceTypeEnumerationInApplesForm() {
        let type = uniqueType()
        let service = NetService(domain: "", type: type, name: "Enumerated", port: 1)
        let r = ServiceRecorder()
        service.delegate = r
        let published = r.expect("didPublish", self)
        service.publish()
        wait(for: [published], timeout: 10)
        let browser = NetServiceBrowser()
        let b = BrowserRecorder()
        browser.delegate = b
        let label = String(type.split(separator: ".")[0])
        let seen = expectation(description: "type listed")
        b.onFind = { if $0.name == label { seen.fulfill() } }
        browser.searchForServices(ofType: "_services._dns-sd._udp.", inDomain: "")
        wait(for: [seen], timeout: 10)
        let entry = b.found.first { $0.name == label }
        XCTAssertEqual(entry?.type, "_tcp.local.")
        browser.stop()
        service.stop()
    }

    func testDelegateRunsOnTheScheduledRunLoop() {
        let type = uniqueType() + "."
        let service = NetService(domain: "", type: type, name: "Threaded", port: 9)
        let done = expectation(description: "published on the worker run loop")
        final class Box: NSObject, NetServiceDelegate, @unchecked Sendable {
            // @unchecked: written by the worker thread, read after the expectation is fulfilled.
            var thread: Thread?
            var worker: Thread?
            let done: XCTestExpectation
            init(_ done: XCTestExpectation) { self.done = done }
            func netServiceDidPublish(_ sender: NetService) { thread = Thread.current; done.fulfill() }
        }
        let box = Box(done)
        service.delegate = box
        let ready = DispatchSemaphore(value: 0)
        let worker = Thread {
            box.worker = Thread.current
            service.remove(from: .main, forMode: .default)
            service.schedule(in: .current, forMode: .default)
            ready.signal()
            let deadline = Date().addingTimeInterval(10)
            while box.thread == nil && Date() < deadline {
                _ = RunLoop.current.run(mode: .default, before: Date().addingTimeInterval(0.1))
            }
        }
        worker.start()
        ready.wait()
        service.publish()
        wait(for: [done], timeout: 10)
        XCTAssertTrue(box.thread === box.worker, "the delegate is called on the run loop it was scheduled in")
        service.stop()
    }

    func testABrowserScheduledOnAWorkerThreadKeepsRunGoingUntilItIsRemoved() throws {
        let type = uniqueType() + "."
        let service = NetService(domain: "", type: type, name: "Worker Found Me", port: 9)
        service.publish()
        defer { service.stop() }
        // Apple-platform code as it is written: a delegate class, a thread that schedules the
        // browser in its own run loop and runs it, and leaves when the delegate is done.
        final class Finder: NSObject, NetServiceBrowserDelegate, @unchecked Sendable {
            // @unchecked: written on the worker thread, read after it signalled.
            var found: [String] = []
            var events: [String] = []
            func netServiceBrowserWillSearch(_ browser: NetServiceBrowser) { events.append("willSearch") }
            func netServiceBrowser(_ browser: NetServiceBrowser, didFind service: NetService, moreComing: Bool) {
                found.append(service.name)
                guard service.name == "Worker Found Me" else { return }
                browser.stop()
                browser.remove(from: .current, forMode: .default)  // nothing keeps the loop now
            }
        }
        let finder = Finder()
        let finished = DispatchSemaphore(value: 0)
        let worker = Thread {
            let browser = NetServiceBrowser()
            browser.delegate = finder
            browser.schedule(in: .current, forMode: .default)
            browser.searchForServices(ofType: type, inDomain: "local.")
            RunLoop.current.run()
            finished.signal()
        }
        worker.start()
        XCTAssertEqual(
            finished.wait(timeout: .now() + 15), .success,
            "run() kept going until the browser was removed: \(finder.events) \(finder.found)")
        XCTAssertEqual(finder.events.first, "willSearch")
        XCTAssertTrue(finder.found.contains("Worker Found Me"), "\(finder.found)")
    }

    func testAServiceTypeLongerThanFifteenCharactersWorksOnLocalAsWithMDNSResponder() throws {
        // Apple code uses such types (mDNSResponder logs and takes them on .local).
        let type = "_salutlongtype\(UInt32.random(in: 100_000...999_999))._tcp."
        final class Publisher: NSObject, NetServiceDelegate, @unchecked Sendable {
            // @unchecked: written on the main run loop, read after the expectation.
            var error: [String: NSNumber]?
            let published: XCTestExpectation
            init(_ published: XCTestExpectation) { self.published = published }
            func netServiceDidPublish(_ sender: NetService) { published.fulfill() }
            func netService(_ sender: NetService, didNotPublish errorDict: [String: NSNumber]) {
                error = errorDict
                published.fulfill()
            }
        }
        let published = expectation(description: "published")
        let publisher = Publisher(published)
        let service = NetService(domain: "local.", type: type, name: "LongType", port: 4242)
        service.delegate = publisher
        service.publish()
        defer { service.stop() }
        wait(for: [published], timeout: 10)
        XCTAssertNil(publisher.error)
        // Avahi's own browser sees it.
        let browse = try Foreign(["avahi-browse", "-pt", String(type.dropLast())])
        XCTAssertTrue(browse.waitForOutput(containing: "LongType", seconds: 10), browse.output)
        browse.stop()
        // Outside .local it is refused, with the code mDNSResponder uses for a bad argument.
        let remote = NetService(domain: "example.org.", type: type, name: "LongType", port: 4242)
        let refused = expectation(description: "refused")
        let refuser = Publisher(refused)
        remote.delegate = refuser
        remote.publish()
        wait(for: [refused], timeout: 10)
        XCTAssertEqual(refuser.error?[NetService.errorCode]?.intValue, NetService.ErrorCode.badArgumentError.rawValue)
    }

    func testTXTHelpersRoundTripAndRejectWhatDoesNotFit() throws {
        let dict: [String: Data] = ["a": Data("1".utf8), "empty": Data(), "bin": Data([0, 255, 10])]
        let data = NetService.data(fromTXTRecord: dict)
        XCTAssertEqual(NetService.dictionary(fromTXTRecord: data), dict)
        XCTAssertEqual(NetService.data(fromTXTRecord: ["": Data()]), Data(), "empty key refused")
        XCTAssertEqual(NetService.data(fromTXTRecord: ["a=b": Data()]), Data(), "'=' in key refused")
        XCTAssertEqual(NetService.data(fromTXTRecord: ["big": Data(count: 252)]), Data(), "over 255 bytes refused")
        XCTAssertEqual(NetService.data(fromTXTRecord: ["big": Data(count: 251)]).count, 256, "exactly 255 fits")
        // Malformed network data: zero-length string, then a length running past the end.
        let hostile = Data([0, 3, 0x61, 0x3D, 0x31, 9, 0x62])
        XCTAssertEqual(NetService.dictionary(fromTXTRecord: hostile), ["a": Data("1".utf8)])
        XCTAssertThrowsError(try TXTRecord(parsing: hostile))
        // Keys compare case-insensitively; the first of two wins.
        let dup = TXTRecord(parsingLeniently: Data([3, 0x4B, 0x3D, 0x31, 3, 0x6B, 0x3D, 0x32]))
        XCTAssertEqual(dup.string(for: "k"), "1")
        XCTAssertEqual(dup.entries.count, 1)
        // A key without '=' is a boolean attribute.
        let flag = try TXTRecord(parsing: Data([4, 0x66, 0x6C, 0x61, 0x67]))
        XCTAssertTrue(flag.contains("FLAG"))
        XCTAssertNil(flag["flag"])
    }
}

extension NetServiceTests {
    /// Apple-style sample code driven by `RunLoop.main.run()` in its own process publishes,
    /// browses, resolves and exits as it would on macOS.
    func testAppleSampleProgramRunsUnchanged() throws {
        let binary = BuiltProduct.path("apple-sample")
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            return XCTFail(
                "build apple-sample first (Scripts/test does: swift build --build-tests builds every target)")
        }
        let run = try Foreign([binary, uniqueType("as") + "."])
        let out = run.finish(seconds: 20)
        XCTAssertEqual(run.process.terminationStatus, 0, out)
        XCTAssertTrue(out.contains("published Apple Sample"), out)
        XCTAssertTrue(out.contains("resolved Apple Sample at ") && out.contains(":4242 hello=world"), out)
    }
}

extension AsyncDiscoveryTests {
    func testEmptyNameMeansTheHostName() async throws {
        let info = try await DiscoveryContext.shared.daemonInfo()
        let ad = try await ServiceAdvertisement.publish(name: "", type: uniqueType(), port: 1)
        XCTAssertEqual(ad.name, info.hostName)
    }
}
