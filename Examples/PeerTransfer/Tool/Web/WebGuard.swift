import Foundation
import HTTPTypes
import Hummingbird

/// What every request to the web page must pass before anything else runs: the token the
/// daemon printed (in the `token` query parameter, or the `X-Peerxfer-Token` header), a `Host`
/// that names this server as it was bound (a DNS name pointed at 127.0.0.1 by another site,
/// DNS rebinding, is refused), and no `Origin` but the page's own (no cross-site request).
/// Every answer carries headers that keep the page to its own assets, out of frames, and out
/// of caches and referrers (the token is in its address).
struct WebGuard<Context: RequestContext>: RouterMiddleware {
    let token: String
    /// The `Host` values this server answers to (`127.0.0.1:8080`, `localhost:8080`, …).
    let hosts: Set<String>

    func handle(
        _ request: Request, context: Context, next: (Request, Context) async throws -> Response
    ) async throws -> Response {
        if let refusal = refusal(of: request) {
            return Self.secured(
                Response(
                    status: refusal.status, headers: [.contentType: "text/plain; charset=utf-8"],
                    body: ResponseBody(byteBuffer: ByteBuffer(string: refusal.text + "\n"))))
        }
        return Self.secured(try await next(request, context))
    }

    /// Why `request` is refused, if it is.
    func refusal(of request: Request) -> (status: HTTPResponse.Status, text: String)? {
        guard let host = request.head.authority?.lowercased(), hosts.contains(host) else {
            return (.misdirectedRequest, "this page answers only to the address peerxfer printed")
        }
        if let origin = request.headers[.origin]?.lowercased(), !hosts.contains(where: { origin == "http://" + $0 }) {
            return (.forbidden, "requests from other sites are refused")
        }
        let given = request.uri.queryParameters["token"].map(String.init) ?? request.headers[webTokenHeader]
        guard let given, Self.same(given, token) else {
            return (.unauthorized, "the token is missing or wrong: open the address `peerxfer serve --web` printed")
        }
        return nil
    }

    /// Compares in a time that does not depend on where they differ.
    static func same(_ a: String, _ b: String) -> Bool {
        let a = Array(a.utf8), b = Array(b.utf8)
        guard a.count == b.count else { return false }
        return zip(a, b).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }

    /// `response` with the page's security headers.
    static func secured(_ response: Response) -> Response {
        var response = response
        response.headers[.contentSecurityPolicy] =
            "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'"
        response.headers[.xContentTypeOptions] = "nosniff"
        response.headers[HTTPField.Name("Referrer-Policy")!] = "no-referrer"
        response.headers[.cacheControl] = "no-store"
        response.headers[HTTPField.Name("X-Frame-Options")!] = "DENY"
        return response
    }
}

/// The header the page's script sends the token in.
let webTokenHeader = HTTPField.Name("X-Peerxfer-Token")!
