import CAvahi
import Foundation
import Salut
@testable import SalutDiscovery
import SalutTestSupport
import XCTest

/// The library's answer to bad input: a typed error or a safe default, never a trap or a hang.
final class DiscoveryInputTests: XCTestCase {
    /// Timeouts that are not a positive finite number of a sane size.
    static let oddTimeouts: [TimeInterval] = [
        .nan, .infinity, -.infinity, -1, 0, 1e20, 1e300, .greatestFiniteMagnitude,
    ]

    func testOddTimeoutsNeverTrapOrHangInTheAsyncAPI() async throws {
        let type = uniqueType("o")
        for (index, timeout) in Self.oddTimeouts.enumerated() {
            try await withDeadline(20, "timeout \(timeout)") {
                let info = try await DiscoveryContext.shared.daemonInfo(timeout: timeout)
                let ad = try await ServiceAdvertisement.publish(
                    name: "Odd \(index)", type: type, port: 4000 + index,
                    timeout: timeout)
                defer { ad.cancel() }
                let resolved = try await DiscoveredService(name: ad.name, type: type).resolve(timeout: timeout)
                XCTAssertEqual(Int(resolved.port), 4000 + index)
                let addresses = try await DiscoveryContext.shared.addresses(ofHost: info.hostNameFQDN, timeout: timeout)
                XCTAssertFalse(addresses.isEmpty)
            }
        }
        // An odd settle time: NaN and negative take the default; an endless one ends at the timeout.
        let ad = try await ServiceAdvertisement.publish(name: "Odd Settle", type: type, port: 4099)
        defer { ad.cancel() }
        for settle in [TimeInterval.nan, -1, .infinity, 1e300] {
            try await withDeadline(10, "settle \(settle)") {
                let resolved = try await DiscoveredService(name: "Odd Settle", type: type).resolve(
                    timeout: 1, settle: settle)
                XCTAssertEqual(resolved.port, 4099)
                let info = try await DiscoveryContext.shared.daemonInfo()
                let addresses = try await DiscoveryContext.shared.addresses(
                    ofHost: info.hostNameFQDN, timeout: 1, settle: settle)
                XCTAssertFalse(addresses.isEmpty)
            }
        }
    }

    func testOddTimeoutsNeverTrapInNetServiceResolve() throws {
        let type = uniqueType("n") + "."
        let service = NetService(domain: "local.", type: type, name: "Odd Apple", port: 4100)
        let publisher = ServiceRecorder()
        service.delegate = publisher
        let published = publisher.expect("didPublish", self)
        service.publish()
        wait(for: [published], timeout: 10)
        defer { service.stop() }
        for timeout in Self.oddTimeouts {
            let seen = NetService(domain: "local.", type: type, name: "Odd Apple")
            let recorder = ServiceRecorder()
            seen.delegate = recorder
            // Zero or less ends the attempt at once (timeoutError, unless an answer is already
            // cached); NaN takes the 5 s default; anything larger waits for the answer.
            let event = timeout.isNaN || timeout > 0 ? "didResolve" : "didNotResolve"
            let answered = recorder.expect(event, self)
            seen.resolve(withTimeout: timeout)
            wait(for: [answered], timeout: 10)
            seen.stop()
        }
    }

    func testTXTKeysAreCaseInsensitive() throws {
        var record = TXTRecord()
        try record.add("Path", Data("/a".utf8))
        XCTAssertThrowsError(try record.add("PATH", Data("/b".utf8))) { error in
            XCTAssertEqual(
                error as? DiscoveryError,
                .invalidTXTRecord(
                    reason: "keys \"Path\" and \"PATH\" are the same key (TXT keys are case-insensitive, RFC 6763 §6.4)"
                ))
        }
        XCTAssertThrowsError(try record.add("Path", nil)) { error in
            XCTAssertEqual(error as? DiscoveryError, .invalidTXTRecord(reason: "key \"Path\" appears twice"))
        }
        XCTAssertEqual(record.string(for: "path"), "/a")
        try record.set("pAtH", to: Data("/c".utf8))  // set replaces, in place, keeping the new spelling
        XCTAssertEqual(record.entries.map(\.key), ["pAtH"])
        XCTAssertEqual(record.string(for: "PATH"), "/c")
        XCTAssertThrowsError(try TXTRecord(["a": "1", "A": "2"])) { error in
            guard let error = error as? DiscoveryError, error.code == .invalidTXTRecord, let reason = error.reason
            else {
                return XCTFail("\(error)")
            }
            XCTAssertTrue(reason.contains("\"A\" and \"a\""), reason)
        }
        XCTAssertThrowsError(try TXTRecord(data: ["k": nil, "K": Data()]))
        // From the network, the first of two keys in any case wins (RFC 6763 §6.4).
        let wire = Data([3]) + Data("a=1".utf8) + Data([3]) + Data("A=2".utf8)
        XCTAssertEqual(TXTRecord(parsingLeniently: wire).entries.map(\.key), ["a"])
    }

    func testTXTSizeIsCheckedBeforePublishing() async throws {
        var record = TXTRecord()
        for index in 1...35 { try record.add(String(format: "k%02d", index), Data(repeating: 0x78, count: 246)) }
        try record.add("last", Data(repeating: 0x79, count: 9))
        XCTAssertEqual(record.size, TXTRecord.maximumPublishedSize)
        XCTAssertEqual(record.size, record.data.count)
        XCTAssertNoThrow(try record.validateForPublishing())

        try record.set("last", to: Data(repeating: 0x79, count: 10))
        let tooBig = DiscoveryError.invalidTXTRecord(
            reason: "the record is 8801 bytes; at most 8800 fit in one mDNS packet "
                + "(RFC 6762 §17), and RFC 6763 §6.2 advises under 1300")
        XCTAssertThrowsError(try record.validateForPublishing()) { XCTAssertEqual($0 as? DiscoveryError, tooBig) }
        XCTAssertThrowsError(
            try ServiceAdvertisement.validate(name: "Big", type: "_xy._tcp", port: 1, txtRecord: record)
        ) {
            XCTAssertEqual($0 as? DiscoveryError, tooBig)
        }
        do {
            _ = try await ServiceAdvertisement.publish(name: "Big", type: uniqueType(), port: 1, txtRecord: record)
            XCTFail("an 8,801-byte TXT record was published")
        } catch {
            XCTAssertEqual(error as? DiscoveryError, tooBig)
        }

        // A live update that is too big is refused and leaves the published record as it was.
        let ad = try await ServiceAdvertisement.publish(name: "Small", type: uniqueType(), port: 1)
        defer { ad.cancel() }
        XCTAssertThrowsError(try ad.updateTXTRecord(record)) { XCTAssertEqual($0 as? DiscoveryError, tooBig) }

        let apple = NetService(domain: "local.", type: uniqueType() + ".", name: "Big", port: 1)
        XCTAssertFalse(apple.setTXTRecord(record.data), "NetService refuses a record it could not publish")
        XCTAssertNil(apple.txtRecordData())
    }

    func testHostNamesAreCheckedBeforeAvahiSeesThem() async throws {
        let refused: [(String, String)] = [
            ("127.0.0.1", "that is an IP address; look up a name such as myhost.local"),
            ("::1", "that is an IP address; look up a name such as myhost.local"),
            ("[fe80::1%lo]", "that is an IP address; look up a name such as myhost.local"),
            ("myhost", "give the full name with its domain, for example myhost.local"),
            ("a..local", "each dot-separated label must be 1 to 63 bytes"),
            ("", "the name is empty"),
            ("a\\065.local", "a host name cannot contain a backslash"),
            ("a\u{1B}b.local", "a host name cannot contain control characters"),
            (String(repeating: "a", count: 64) + ".local", "each dot-separated label must be 1 to 63 bytes"),
        ]
        for (name, reason) in refused {
            XCTAssertThrowsError(try DiscoveryContext.validate(hostName: name)) { error in
                XCTAssertEqual(error as? DiscoveryError, .invalidHostName(name, reason: reason))
            }
            do {
                _ = try await DiscoveryContext.shared.addresses(ofHost: name, timeout: 1)
                XCTFail("\(name) was looked up")
            } catch {
                XCTAssertEqual(error as? DiscoveryError, .invalidHostName(name, reason: reason))
            }
        }
        XCTAssertNoThrow(try DiscoveryContext.validate(hostName: "myhost.local"))
        XCTAssertNoThrow(try DiscoveryContext.validate(hostName: "myhost.local."))
        XCTAssertNoThrow(try DiscoveryContext.validate(hostName: "1.2.3.4.local"))
    }

    func testServicesAreCheckedBeforeTheDaemonIsAsked() {
        XCTAssertNoThrow(try DiscoveredService(name: "Kitchen", type: "_http._tcp").validate())
        XCTAssertThrowsError(try DiscoveredService(name: "", type: "_http._tcp").validate()) {
            XCTAssertEqual($0 as? DiscoveryError, .invalidServiceName("", reason: "the name is empty"))
        }
        // A Unicode noncharacter: Avahi escapes it in the full name and cannot read it back.
        XCTAssertThrowsError(try ServiceAdvertisement.validate(name: "Desk\u{FFFF}", type: "_http._tcp", port: 80)) {
            XCTAssertEqual(
                $0 as? DiscoveryError,
                .invalidServiceName(
                    "Desk\u{FFFF}",
                    reason: "contains U+FFFF, a Unicode noncharacter, which Avahi cannot carry in a service's full name"
                ))
        }
        XCTAssertNoThrow(try ServiceAdvertisement.validate(name: "Café ☕", type: "_http._tcp", port: 80))
        XCTAssertThrowsError(try DiscoveredService(name: "x", type: "_http._tcp", domain: "a..b").validate()) {
            XCTAssertEqual($0 as? DiscoveryError, .invalidDomain("a..b"))
        }
        XCTAssertNoThrow(try ServiceAdvertisement.validate(name: "", type: "_http._tcp", port: 80))
        XCTAssertThrowsError(try ServiceAdvertisement.validate(name: "x", type: "_http._tcp", port: 70000)) {
            XCTAssertEqual($0 as? DiscoveryError, .invalidPort(70000))
        }
        XCTAssertThrowsError(
            try ServiceAdvertisement.validate(name: "x", type: "_http._tcp", port: 1, subtypes: ["no"]))
    }

    func testAvahiInvalidArgumentNumbersBecomeTypedErrors() {
        // Avahi's bare numbers, should a name get past our own checks.
        let host = DiscoveryError(avahiCode: Int32(AVAHI_ERR_INVALID_HOST_NAME))
        XCTAssertTrue(
            "\(host)".hasPrefix("invalid host name: avahi-daemon refused it (Invalid host name, Avahi error -3)"),
            "\(host)")
        XCTAssertTrue(
            "\(host.naming(host: "x.local"))".hasPrefix("invalid host name \"x.local\": avahi-daemon refused it"))
        XCTAssertEqual(host.netServiceErrorCode, .badArgumentError)
        let name = DiscoveryError(avahiCode: Int32(AVAHI_ERR_INVALID_SERVICE_NAME)).naming(service: "N")
        XCTAssertTrue("\(name)".hasPrefix("invalid service name \"N\": avahi-daemon refused it"), "\(name)")
        XCTAssertEqual(
            "\(DiscoveryError(avahiCode: Int32(AVAHI_ERR_INVALID_DOMAIN_NAME)))",
            "invalid domain (refused by avahi-daemon)")
        XCTAssertEqual(
            DiscoveryError(avahiCode: Int32(AVAHI_ERR_INVALID_DOMAIN_NAME)).naming(domain: "d"), .invalidDomain("d"))
    }
}
