import Foundation
import SalutStreams
import XCTest

/// `TrustedKeys`: a book of keys trusted on first use, in a file a person may edit while it is
/// in use.
final class TrustedKeysTests: XCTestCase {
    let alice = String(repeating: "a1", count: 32)
    let bob = String(repeating: "b2", count: 32)
    let other = String(repeating: "c3", count: 32)

    var folder = ""

    override func setUpWithError() throws {
        folder = FileManager.default.temporaryDirectory.appendingPathComponent("keys-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
    }

    override func tearDown() {
        try? FileManager.default.removeItem(atPath: folder)
    }

    func onDisk(_ path: String) throws -> [String: String] {
        try JSONDecoder().decode([String: String].self, from: Data(contentsOf: URL(fileURLWithPath: path)))
    }

    func testTheFirstKeyIsTrustedAndWrittenAndAnotherForTheSameNameIsNot() throws {
        let path = folder + "/known"
        let book = try TrustedKeys(path: path)
        XCTAssertEqual(book.entries, [:], "a missing file is an empty book")
        XCTAssertFalse(FileManager.default.fileExists(atPath: path), "nothing written before a key is trusted")

        XCTAssertTrue(try book.trustOnFirstUse(alice.uppercased(), for: "alice"), "first use")
        XCTAssertEqual(try onDisk(path), ["alice": alice], "written before it returns, in lowercase")
        var status = stat()
        XCTAssertEqual(stat(path, &status), 0)
        XCTAssertEqual(status.st_mode & 0o777, 0o600, "only its owner reads it")

        XCTAssertTrue(try book.trustOnFirstUse(alice, for: "alice"), "the same key again")
        XCTAssertFalse(try book.trustOnFirstUse(other, for: "alice"), "another key under a trusted name")
        XCTAssertEqual(book.key(for: "alice"), alice, "unchanged")

        XCTAssertTrue(try book.trustOnFirstUse(alice, for: "alice's laptop"))
        let colons = stride(from: 0, to: 64, by: 2).map { _ in "A1" }.joined(separator: ":")
        XCTAssertEqual(book.names(trusting: colons), ["alice", "alice's laptop"], "any spelling of the key")
        XCTAssertEqual(book.names(trusting: "kitchen"), [])
        XCTAssertThrowsError(try book.trustOnFirstUse("kitchen", for: "bob")) { error in
            XCTAssertTrue("\(error)".contains("not a SHA-256 fingerprint"), "\(error)")
        }
        XCTAssertNil(book.key(for: "bob"))

        // Another book on the same file reads what the first wrote.
        XCTAssertEqual(try TrustedKeys(path: path).entries, ["alice": alice, "alice's laptop": alice])
    }

    /// Two books on one file (as two processes would have) keep each other's keys; names
    /// compare without ASCII case and keep the case they were first given in.
    func testBooksOnOneFileKeepEachOthersKeysAndNamesCompareWithoutCase() throws {
        let path = folder + "/known"
        let first = try TrustedKeys(path: path), second = try TrustedKeys(path: path)
        XCTAssertTrue(try first.trustOnFirstUse(alice, for: "Alice's Laptop"))
        XCTAssertTrue(try second.trustOnFirstUse(bob, for: "bob"))
        XCTAssertEqual(try onDisk(path), ["Alice's Laptop": alice, "bob": bob], "neither lost the other's")
        XCTAssertEqual(first.key(for: "BOB"), bob)
        XCTAssertFalse(try second.trustOnFirstUse(other, for: "alice's laptop"), "the same name in another case")
        XCTAssertEqual(second.names(trusting: alice), ["Alice's Laptop"])
    }

    func testAnEditOnDiskIsHeardAtTheNextLookUpWithoutARestart() throws {
        let path = folder + "/known"
        let book = try TrustedKeys(path: path)
        XCTAssertTrue(try book.trustOnFirstUse(alice, for: "alice"))
        XCTAssertTrue(try book.trustOnFirstUse(bob, for: "bob"))

        // A person removes bob's entry (his key changed): the book hears it, and bob's new key
        // is then trusted on first use.
        try Data("{\"alice\": \"\(alice)\"}\n".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertNil(book.key(for: "bob"))
        XCTAssertTrue(try book.trustOnFirstUse(other, for: "bob"))
        XCTAssertEqual(try onDisk(path), ["alice": alice, "bob": other])

        // The same size, another key, in another second (as an editor may leave it): heard.
        try Data("{\"alice\": \"\(alice)\", \"bob\": \"\(bob)\"}".utf8).write(to: URL(fileURLWithPath: path))
        var times = [timespec(tv_sec: 1_000_000_000, tv_nsec: 0), timespec(tv_sec: 1_000_000_000, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, path, &times, 0), 0)
        XCTAssertEqual(book.key(for: "bob"), bob)
        let swapped = Data("{\"alice\": \"\(alice)\", \"bob\": \"\(other)\"}".utf8)
        try swapped.write(to: URL(fileURLWithPath: path))
        times = [timespec(tv_sec: 1_000_000_001, tv_nsec: 0), timespec(tv_sec: 1_000_000_001, tv_nsec: 0)]
        XCTAssertEqual(utimensat(AT_FDCWD, path, &times, 0), 0)
        XCTAssertEqual(book.key(for: "bob"), other, "a same-size edit is heard by its time")

        // Forgetting writes the file too; `{}` forgets every key.
        try book.forget("alice")
        XCTAssertEqual(try onDisk(path), ["bob": other])
        XCTAssertNil(book.key(for: "alice"))
        try Data("{}".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(book.entries, [:])
    }

    /// A name written with code points that Unicode composes otherwise (a Kelvin sign for the
    /// K of "Kitchen") is never trusted, and never found as the name it looks like; a folder
    /// others can change, a symbolic link and a FIFO at the book's place are refused, and the
    /// book holds at most maximumEntries names.
    func testNamesThatPassForOthersAndPlacesOthersControlAreRefused() throws {
        let path = folder + "/known"
        let book = try TrustedKeys(path: path)
        XCTAssertTrue(try book.trustOnFirstUse(alice, for: "Kitchen"))
        XCTAssertNil(book.key(for: "\u{212a}itchen"), "a twin is another name")
        XCTAssertThrowsError(try book.trustOnFirstUse(other, for: "\u{212a}itchen")) { error in
            XCTAssertEqual((error as? TrustedKeys.Failure)?.code, .unnormalizedName, "\(error)")
            XCTAssertTrue("\(error)".contains("\\u{212a}itchen"), "escaped: \(error)")
        }
        XCTAssertThrowsError(try book.trustOnFirstUse(other, for: "Cafe\u{301}"))
        XCTAssertTrue(try book.trustOnFirstUse(other, for: "Caf\u{e9}"))
        XCTAssertEqual(try onDisk(path), ["Kitchen": alice, "Caf\u{e9}": other])

        // A name not in NFC in the file (an older version's, or written by hand) is left out:
        // never trusted, and not trusted anew; the rest of the book stands.
        let decomposed = folder + "/decomposed"
        try Data("{\"Cafe\u{301}\": \"\(alice)\", \"bob\": \"\(bob)\"}".utf8).write(
            to: URL(fileURLWithPath: decomposed))
        XCTAssertEqual(chmod(decomposed, 0o600), 0)
        let older = try TrustedKeys(path: decomposed)
        XCTAssertEqual(older.entries, ["bob": bob])
        XCTAssertThrowsError(try older.trustOnFirstUse(other, for: "Cafe\u{301}"))

        // A symbolic link, and a FIFO (which would hold the reader forever).
        XCTAssertEqual(symlink(path, folder + "/link"), 0)
        XCTAssertThrowsError(try TrustedKeys(path: folder + "/link")) { error in
            XCTAssertEqual((error as? TrustedKeys.Failure)?.code, .insecure, "\(error)")
        }
        XCTAssertEqual(mkfifo(folder + "/fifo", 0o600), 0)
        XCTAssertThrowsError(try TrustedKeys(path: folder + "/fifo"))

        // A folder others can write (not sticky): they could swap the file for an old copy.
        let shared = folder + "/shared"
        try FileManager.default.createDirectory(atPath: shared, withIntermediateDirectories: true)
        XCTAssertTrue(try TrustedKeys(path: shared + "/known").trustOnFirstUse(alice, for: "a"))
        XCTAssertEqual(chmod(shared, 0o777), 0)
        XCTAssertThrowsError(try TrustedKeys(path: shared + "/known")) { error in
            XCTAssertEqual((error as? TrustedKeys.Failure)?.code, .insecure, "\(error)")
        }
        XCTAssertEqual(chmod(shared, 0o1777), 0)
        XCTAssertEqual(
            try TrustedKeys(path: shared + "/known").key(for: "a"), alice, "sticky, as /tmp: yours stay yours")

        // The most names a book trusts on first use (a larger book written before is read whole).
        let many = folder + "/many"
        let full = Dictionary(uniqueKeysWithValues: (0...TrustedKeys.maximumEntries).map { ("peer \($0)", alice) })
        try JSONEncoder().encode(full).write(to: URL(fileURLWithPath: many))
        XCTAssertEqual(chmod(many, 0o600), 0)
        XCTAssertThrowsError(try TrustedKeys(path: many).trustOnFirstUse(alice, for: "one more")) { error in
            XCTAssertEqual((error as? TrustedKeys.Failure)?.code, .full, "\(error)")
        }
    }

    /// A file removed while in use is not taken for "trust no one, then anyone": an editor
    /// that saves by renaming the old file away would otherwise open a window in which any key
    /// is trusted on first use.
    func testAFileRemovedWhileInUseKeepsTheBookAndTrustsNoNewKey() throws {
        let path = folder + "/known"
        let book = try TrustedKeys(path: path)
        XCTAssertTrue(try book.trustOnFirstUse(alice, for: "alice"))
        try FileManager.default.removeItem(atPath: path)
        XCTAssertEqual(book.key(for: "alice"), alice, "what was trusted stays trusted")
        XCTAssertThrowsError(try book.trustOnFirstUse(bob, for: "bob")) { error in
            XCTAssertEqual((error as? TrustedKeys.Failure)?.code, .unreadable)
            XCTAssertTrue("\(error)".contains("was removed while in use"), "\(error)")
        }
        XCTAssertFalse(FileManager.default.fileExists(atPath: path), "nothing written in its place")
        try Data("{\"alice\": \"\(alice)\"}".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertTrue(try book.trustOnFirstUse(bob, for: "bob"), "back: keys are trusted on first use again")
    }

    /// A book others could have written (a key planted by another user) is refused, as ssh's
    /// StrictModes refuses such files.
    func testAFileOthersCanWriteIsRefused() throws {
        let path = folder + "/known"
        let book = try TrustedKeys(path: path)
        XCTAssertTrue(try book.trustOnFirstUse(alice, for: "alice"))
        XCTAssertEqual(chmod(path, 0o666), 0)
        XCTAssertThrowsError(try TrustedKeys(path: path)) { error in
            XCTAssertEqual((error as? TrustedKeys.Failure)?.code, .insecure)
            XCTAssertTrue("\(error)".contains("chmod go-w"), "\(error)")
        }
        try Data("{\"mallory\": \"\(other)\"}".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertNil(book.key(for: "mallory"), "a planted key is not read")
        XCTAssertThrowsError(try book.trustOnFirstUse(bob, for: "bob"))
        XCTAssertEqual(chmod(path, 0o600), 0)
        XCTAssertEqual(book.key(for: "mallory"), other, "once only its owner can write it, it is read")
    }

    func testADamagedFileKeepsWhatWasTrustedAndIsNotWrittenOver() throws {
        let path = folder + "/known"
        let book = try TrustedKeys(path: path)
        XCTAssertTrue(try book.trustOnFirstUse(alice, for: "alice"))
        let damaged = Data("{\"alice\": \"\(alice)\", oops".utf8)
        try damaged.write(to: URL(fileURLWithPath: path))

        XCTAssertEqual(book.key(for: "alice"), alice, "what was trusted stays trusted")
        XCTAssertTrue(try book.trustOnFirstUse(alice, for: "alice"), "a trusted key is still recognised")
        XCTAssertThrowsError(try book.trustOnFirstUse(bob, for: "bob"), "nothing is trusted anew") { error in
            XCTAssertEqual((error as? TrustedKeys.Failure)?.code, .malformed)
            XCTAssertTrue("\(error)".contains("mend it, then try again"), "\(error)")
        }
        XCTAssertThrowsError(try book.forget("alice"))
        XCTAssertEqual(
            try Data(contentsOf: URL(fileURLWithPath: path)), damaged, "the person's file is not written over")
        XCTAssertThrowsError(try TrustedKeys(path: path), "a new book refuses it") { error in
            XCTAssertTrue("\(error)".contains("not a JSON object of names and keys"), "\(error)")
        }

        // Mended: read again.
        try Data("{\"bob\": \"\(bob)\"}".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertEqual(book.entries, ["bob": bob])
        XCTAssertTrue(try book.trustOnFirstUse(alice, for: "alice"))

        try Data("{\"bob\": \"kitchen\"}".utf8).write(to: URL(fileURLWithPath: path))
        XCTAssertThrowsError(try TrustedKeys(path: path)) { error in
            XCTAssertTrue("\(error)".contains("the key of \"bob\" is not a SHA-256 fingerprint"), "\(error)")
        }
    }
}
