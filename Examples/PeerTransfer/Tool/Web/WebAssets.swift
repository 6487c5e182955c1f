/// The web page's own files: plain HTML, CSS and JavaScript, shipped in the binary (no CDN, no
/// build step). The script builds every element with `textContent`, never markup from data:
/// names and paths that came from the network cannot become HTML.
enum WebAssets {
    /// The page, its assets addressed with `token` (hex digits only: safe in an attribute).
    static func page(token: String) -> String {
        precondition(token.allSatisfy(\.isHexDigit))
        return #"""
            <!doctype html>
            <html lang="en">
            <head>
            <meta charset="utf-8">
            <meta name="viewport" content="width=device-width, initial-scale=1">
            <title>peerxfer</title>
            <link rel="stylesheet" href="/style.css?token=TOKEN">
            <script src="/app.js?token=TOKEN" defer></script>
            </head>
            <body>
            <header>
              <h1>peerxfer <span id="device-name"></span></h1>
              <p>This device's key: <code id="device-key"></code></p>
            </header>
            <main>
              <section aria-labelledby="send-heading">
                <h2 id="send-heading">Send files</h2>
                <fieldset id="receivers">
                  <legend>To</legend>
                  <p id="no-receivers">Looking for receivers on the link…</p>
                </fieldset>
                <div id="drop" class="drop">
                  <p>Drop files here, or</p>
                  <label for="files">choose files</label>
                  <input id="files" type="file" multiple>
                </div>
                <button id="send" type="button">Send</button>
                <p id="send-status" role="status" aria-live="polite"></p>
                <ul id="uploads" aria-label="Files being handed to this daemon"></ul>
              </section>
              <section aria-labelledby="offers-heading">
                <h2 id="offers-heading">Incoming offers</h2>
                <p id="no-offers">None waiting.</p>
                <ul id="offers" aria-live="polite"></ul>
              </section>
              <section aria-labelledby="history-heading">
                <h2 id="history-heading">Transfers</h2>
                <p id="no-transfers">None yet.</p>
                <ul id="transfers"></ul>
              </section>
            </main>
            </body>
            </html>
            """#.replacingOccurrences(of: "TOKEN", with: token)
    }

    static let style = #"""
        body { font-family: system-ui, sans-serif; margin: 0 auto; max-width: 52rem; padding: 1rem; color: #1b1b1b; }
        h1 span { font-weight: normal; color: #555; }
        code { word-break: break-all; }
        section { border-top: 1px solid #ccc; padding: 0.5rem 0 1rem; }
        fieldset { border: 1px solid #bbb; }
        .receiver { margin: 0.3rem 0; }
        .receiver small, .offer small { color: #444; }
        .drop { border: 2px dashed #888; padding: 1rem; margin: 0.8rem 0; text-align: center; }
        .drop.over { background: #eef5ff; border-color: #2563eb; }
        button { font-size: 1rem; padding: 0.3rem 0.9rem; margin: 0.2rem 0.3rem 0.2rem 0; }
        button:focus-visible, input:focus-visible, label:focus-within { outline: 3px solid #2563eb; outline-offset: 2px; }
        progress { width: 12rem; vertical-align: middle; }
        ul { list-style: none; padding: 0; }
        li { margin: 0.4rem 0; }
        .offer { border: 1px solid #bbb; padding: 0.6rem; }
        .offer ul { list-style: disc; padding-left: 1.5rem; max-height: 10rem; overflow: auto; }
        .warning { color: #a40000; font-weight: bold; }
        """#

    static let script = #"""
        "use strict";
        const token = new URL(document.currentScript.src).searchParams.get("token");
        const $ = (id) => document.getElementById(id);
        const make = (tag, text, cls) => {
          const element = document.createElement(tag);
          if (text !== undefined) element.textContent = text;
          if (cls) element.className = cls;
          return element;
        };
        const api = (path, options = {}) => {
          options.headers = Object.assign({ "X-Peerxfer-Token": token }, options.headers || {});
          return fetch(path, options).then(async (response) => {
            const body = await response.json().catch(() => ({}));
            if (!response.ok) throw new Error(body.error || response.statusText);
            return body;
          });
        };
        // Spaces as %20: the server reads a query as RFC 3986 says, where "+" is a plus.
        const query = (fields) =>
          Object.entries(fields).map(([key, value]) => `${encodeURIComponent(key)}=${encodeURIComponent(value)}`).join("&");
        let chosen = "";
        let shown = {};
        const changed = (part, value) => {
          const text = JSON.stringify(value);
          if (shown[part] === text) return false;
          shown[part] = text;
          return true;
        };

        function render(state) {
          if (changed("device", state.device)) {
            $("device-name").textContent = "· " + state.device.name;
            $("device-key").textContent = state.device.key;
          }
          if (changed("receivers", [state.receivers, chosen])) renderReceivers(state.receivers);
          if (changed("offers", state.offers.map((o) => o.id))) renderOffers(state.offers);
          for (const offer of state.offers) {
            const left = document.querySelector(`[data-offer="${offer.id}"] .left`);
            if (left) left.textContent = `${Math.floor(offer.secondsLeft / 60)}:${String(offer.secondsLeft % 60).padStart(2, "0")} left to answer`;
          }
          if (changed("transfers", state.transfers)) renderTransfers(state.transfers);
        }

        function renderReceivers(receivers) {
          const box = $("receivers");
          for (const old of box.querySelectorAll(".receiver")) old.remove();
          $("no-receivers").hidden = receivers.length > 0;
          // Paired ones first: those are the ones sent to most.
          const ordered = receivers.filter((r) => r.trust === "paired").concat(receivers.filter((r) => r.trust !== "paired"));
          ordered.forEach((receiver, index) => {
            const row = make("div", undefined, "receiver");
            const input = make("input");
            input.type = "radio";
            input.name = "to";
            input.id = "to-" + index;
            input.value = receiver.raw;
            input.checked = receiver.raw === chosen;
            input.addEventListener("change", () => { chosen = receiver.raw; });
            const label = make("label", receiver.name);
            label.htmlFor = input.id;
            row.append(input, " ", label, " ");
            if (receiver.trust === "paired") {
              row.append(make("small", "(paired)"));
            } else if (receiver.trust === "key-changed") {
              row.append(make("small", "KEY CHANGED: not the key paired under this name; nothing is sent to it", "warning"));
              input.disabled = true;
            } else if (receiver.trust === "new") {
              row.append(make("small", `(new: verification code ${receiver.code}; check that its page shows the same) `));
              const pair = make("button", "Pair with " + receiver.name);
              pair.type = "button";
              pair.addEventListener("click", () => {
                api("/api/pair?" + query({ name: receiver.raw, key: receiver.key }), { method: "POST" })
                  .then(() => say(`Paired with ${receiver.name}, both ways: it may send to this device too.`))
                  .catch((error) => say(`Not paired: ${error.message}`));
              });
              row.append(pair);
            } else {
              row.append(make("small", "(its key is not known yet)"));
              input.disabled = true;
            }
            box.append(row);
          });
        }

        function renderOffers(offers) {
          const list = $("offers");
          list.replaceChildren();
          $("no-offers").hidden = offers.length > 0;
          for (const offer of offers) {
            const item = make("li", undefined, "offer");
            item.dataset.offer = offer.id;
            item.append(make("p", `${offer.introduction} offers ${offer.files} file${offer.files === 1 ? "" : "s"} (${offer.size}):`));
            const entries = make("ul");
            for (const entry of offer.entries) entries.append(make("li", entry));
            if (offer.more > 0) entries.append(make("li", `(and ${offer.more} more)`));
            item.append(entries, make("p", "", "left"));
            const choices = [["yes", "Accept"], ["no", "Decline"]];
            if (!offer.trusted) choices.push(["always", "Always accept from this sender"]);
            for (const [answer, text] of choices) {
              const button = make("button", text);
              button.type = "button";
              // Not clickable at once: a click meant for an offer that was just withdrawn must
              // not answer the one drawn in its place.
              button.disabled = true;
              setTimeout(() => { button.disabled = false; }, 1500);
              button.addEventListener("click", () => {
                api(`/api/answer?offer=${offer.id}&answer=${answer}`, { method: "POST" })
                  .then(() => say(`${text}: done.`))
                  .catch((error) => say(error.message));
              });
              item.append(button);
            }
            list.append(item);
          }
        }

        function renderTransfers(transfers) {
          const list = $("transfers");
          list.replaceChildren();
          $("no-transfers").hidden = transfers.length > 0;
          for (const transfer of transfers) {
            const item = make("li");
            item.dataset.transfer = transfer.id;
            if (transfer.task) item.dataset.task = transfer.task;
            item.dataset.state = transfer.state;
            const bar = make("progress");
            bar.max = 100;
            bar.value = transfer.percent;
            bar.setAttribute("aria-label", `${transfer.percent}%`);
            item.append(bar, " ", make("span", transfer.line));
            list.append(item);
          }
        }

        function say(text) { $("send-status").textContent = text; }

        function upload(file, to, batch, count) {
          const item = make("li");
          const bar = make("progress");
          bar.max = 100;
          bar.value = 0;
          bar.setAttribute("aria-label", "handed over: 0%");
          const words = make("span", ` ${file.name}: handing over to the daemon…`);
          item.append(bar, words);
          $("uploads").append(item);
          const request = new XMLHttpRequest();
          request.open("POST", "/api/send?" + query({ to, file: file.name, batch, count }));
          request.setRequestHeader("X-Peerxfer-Token", token);
          request.upload.addEventListener("progress", (event) => {
            if (event.lengthComputable) {
              bar.value = Math.floor(event.loaded * 100 / event.total);
              bar.setAttribute("aria-label", `handed over: ${bar.value}%`);
            }
          });
          request.addEventListener("load", () => {
            let body = {};
            try { body = JSON.parse(request.responseText); } catch (error) {}
            if (request.status === 200 && body.task) {
              bar.value = 100;
              words.textContent = ` ${file.name}: queued for ${to} (task ${body.task.slice(0, 8)}); its progress is under Transfers`;
            } else if (request.status === 200) {
              bar.value = 100;
              words.textContent = ` ${file.name}: handed over; it goes with the other files chosen with it`;
            } else {
              words.textContent = ` ${file.name}: not sent: ${body.error || request.statusText}`;
            }
          });
          request.addEventListener("error", () => { words.textContent = ` ${file.name}: not sent: the daemon did not answer`; });
          request.send(file);
        }

        function sendFiles(files) {
          if (!chosen) { say("Choose a receiver first."); return; }
          if (files.length === 0) { say("Choose or drop files first."); return; }
          // One batch: the daemon sends them as one offer, one question at the receiver.
          const batch = Array.from(crypto.getRandomValues(new Uint8Array(16)), (b) => b.toString(16).padStart(2, "0")).join("");
          for (const file of files) upload(file, chosen, batch, files.length);
          say(`${files.length} file${files.length === 1 ? "" : "s"} handed to the daemon for ${chosen}.`);
        }

        $("send").addEventListener("click", () => sendFiles(Array.from($("files").files)));
        const drop = $("drop");
        drop.addEventListener("dragover", (event) => { event.preventDefault(); drop.classList.add("over"); });
        drop.addEventListener("dragleave", () => drop.classList.remove("over"));
        drop.addEventListener("drop", (event) => {
          event.preventDefault();
          drop.classList.remove("over");
          sendFiles(Array.from(event.dataTransfer.files));
        });

        const events = new EventSource("/api/events?token=" + encodeURIComponent(token));
        events.addEventListener("message", (event) => render(JSON.parse(event.data)));
        events.addEventListener("error", () => {
          // The browser tries again by itself unless the daemon refused the stream.
          say(events.readyState === EventSource.CLOSED
            ? "The daemon refused this page's updates (too many pages open, or it stopped): reload to try again."
            : "Lost touch with the daemon; trying again…");
        });
        """#
}
