#!/usr/bin/env python3
"""peerxfer's web page (`serve --web`) in a real browser: headless Chromium driven by Selenium,
against real daemons on this machine (loopback, and mDNS through the sandbox avahi-daemon).

Usage: peerxfer_web.py PATH/TO/peerxfer [SCREENSHOT.png]
Ends with a line 'N passed, N failed' and exits 1 when any failed.
"""
import filecmp
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
import uuid

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

PEERXFER = os.path.abspath(sys.argv[1])
SCREENSHOT = sys.argv[2] if len(sys.argv) > 2 else None
ROOT = tempfile.mkdtemp(prefix="peerxfer-web-")
DAEMONS = []


def wait(what, condition, seconds=30):
    """Polls `condition` until it returns something true, or fails after `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            value = condition()
        except Exception:  # the page may be between two renders
            value = None
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {seconds} s waiting for {what}")
        time.sleep(0.1)


def unique(base):
    return f"{base} {uuid.uuid4().hex[:6]}"


class Daemon:
    def __init__(self, name, *extra):
        self.name = name
        self.dir = os.path.join(ROOT, uuid.uuid4().hex[:8])
        os.makedirs(self.dir)
        self.inbox = os.path.join(self.dir, "inbox")
        self.log = open(os.path.join(self.dir, "log"), "w+")
        self.process = subprocess.Popen(
            [PEERXFER, "serve", "--name", name, "--config", os.path.join(self.dir, "config"),
             "--inbox", self.inbox, *extra],
            stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        DAEMONS.append(self)
        wait(f"{name} to serve", lambda: "serving" in self.output(), 30)

    def output(self):
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    @property
    def config(self):
        return os.path.join(self.dir, "config")

    def web_url(self):
        return wait(f"{self.name}'s web address",
                    lambda: (re.search(r"web page: (http://\S+)", self.output()) or [None, None])[1], 30)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def make_file(name, size, seed=1):
    path = os.path.join(ROOT, "src", uuid.uuid4().hex[:8], name)
    os.makedirs(os.path.dirname(path))
    with open(path, "wb") as f:
        f.write(bytes((i * 31 + seed) % 256 for i in range(size)))
    return path


def browser():
    options = webdriver.ChromeOptions()
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1000,1300"):
        options.add_argument(argument)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def send_cli(path, to, config, *extra):
    return subprocess.Popen(
        [PEERXFER, "send", path, "--to", to, "--config", config, "--accept-new-key", "--json", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)


def answer(item, text):
    """Clicks the offer's button `text` once it takes clicks (an offer's buttons wait a moment
    after it appears, so that a click meant for a withdrawn offer never answers its successor)."""
    button = item.find_element(By.XPATH, f".//button[text()='{text}']")
    wait(f"{text} to take clicks", button.is_enabled, 10)
    button.click()


def offer_item(driver, text):
    """The offer whose text holds `text`."""
    for item in driver.find_elements(By.CSS_SELECTOR, "#offers > li"):
        if text in item.text:
            return item
    return None


def test_the_page_lists_a_receiver_pairs_by_code_and_sends_a_chosen_file(driver):
    sender = Daemon(unique("Web sender"), "--accept", "all", "--web", "0")
    receiver = Daemon(unique("Web receiver"), "--accept", "all")
    driver.get(sender.web_url())
    wait("the receiver listed", lambda: receiver.name in driver.find_element(By.ID, "receivers").text)
    # New here: its verification code is shown, and pairing is a click.
    listed = driver.find_element(By.ID, "receivers").text
    assert "verification code" in listed, listed
    driver.find_element(By.XPATH, f"//button[text()='Pair with {receiver.name}']").click()
    wait("paired", lambda: "(paired)" in driver.find_element(By.ID, "receivers").text)
    label = driver.find_element(By.XPATH, f"//label[text()='{receiver.name}']")
    driver.find_element(By.ID, label.get_attribute("for")).click()
    # Two files chosen together, a large and a small one: one send (one offer), both whole.
    path = make_file("photo.bin", 3 * 1024 * 1024 + 17)
    note = make_file("note.txt", 100, seed=3)
    driver.find_element(By.ID, "files").send_keys(path + "\n" + note)
    driver.find_element(By.ID, "send").click()
    done = wait("the transfer done, its bar full", lambda: [
        row for row in driver.find_elements(By.CSS_SELECTOR, "#transfers > li")
        if row.get_attribute("data-state") == "done"
        and row.find_element(By.TAG_NAME, "progress").get_attribute("value") == "100"], 60)
    assert len(done) == 1 and "2 files" in done[0].text and receiver.name in done[0].text, done[0].text
    assert filecmp.cmp(path, os.path.join(receiver.inbox, "photo.bin"), shallow=False)
    assert filecmp.cmp(note, os.path.join(receiver.inbox, "note.txt"), shallow=False)
    # The copy the page handed over goes once it is sent.
    outbox = os.path.join(sender.config, "outbox")
    wait("the copy removed", lambda: not os.listdir(outbox), 20)
    # A page open in a browser does not hold the daemon up when it is told to stop.
    sender.process.send_signal(signal.SIGTERM)
    started = time.monotonic()
    sender.process.wait(30)
    assert time.monotonic() - started < 10, f"stopped after {time.monotonic() - started:.1f} s"
    assert sender.process.returncode == 0, sender.output()


def test_an_offer_accepted_in_the_page_lands_and_a_declined_one_does_not(driver):
    receiver = Daemon(unique("Web asks"), "--accept", "ask", "--web", "0")
    driver.get(receiver.web_url())
    wait("the page", lambda: driver.find_element(By.ID, "no-offers").is_displayed())
    config = os.path.join(ROOT, "cli-" + uuid.uuid4().hex[:6])
    wanted = make_file("wanted.txt", 1000)
    send = send_cli(wanted, receiver.name, config, "--name", "Ana's laptop")
    item = wait("the offer", lambda: offer_item(driver, "wanted.txt"))
    assert "Ana's laptop" in item.text and "offers 1 file" in item.text, item.text
    answer(item, "Accept")
    output, _ = send.communicate(timeout=60)
    assert send.returncode == 0, output
    assert filecmp.cmp(wanted, os.path.join(receiver.inbox, "wanted.txt"), shallow=False)

    unwanted = make_file("unwanted.txt", 1000, seed=2)
    send = send_cli(unwanted, receiver.name, config)
    item = wait("the second offer", lambda: offer_item(driver, "unwanted.txt"))
    answer(item, "Decline")
    output, _ = send.communicate(timeout=60)
    assert send.returncode == 5, output
    assert "declined by the person at the receiver" in output, output
    assert not os.path.exists(os.path.join(receiver.inbox, "unwanted.txt"))
    history = wait("both outcomes in the history", lambda: (lambda text: text if "declined by the person there"
                   in text and "done, 1/1 verified" in text else None)(driver.find_element(By.ID, "transfers").text))
    assert "Ana's laptop" in history, history
    if SCREENSHOT:
        driver.save_screenshot(SCREENSHOT)


def test_hostile_names_render_as_text(driver):
    receiver = Daemon(unique("Web hostile"), "--accept", "ask", "--web", "0")
    driver.get(receiver.web_url())
    config = os.path.join(ROOT, "cli-" + uuid.uuid4().hex[:6])
    path = make_file("<img src=x onerror=document.title='pwned'><b>bold.txt", 10)
    send = send_cli(path, receiver.name, config, "--name", "<script>document.title='pwned'</script>")
    item = wait("the hostile offer", lambda: offer_item(driver, "<b>bold.txt"))
    assert "<script>document.title='pwned'</script>" in item.text, item.text
    assert "<img src=x onerror=document.title='pwned'><b>bold.txt" in item.text, item.text
    assert driver.find_elements(By.CSS_SELECTOR, "#offers img, #offers b, #offers script") == []
    assert driver.title == "peerxfer", driver.title
    answer(item, "Decline")
    send.communicate(timeout=60)


def test_requests_without_the_token_or_from_elsewhere_are_refused(driver):
    daemon = Daemon(unique("Web guard"), "--accept", "all", "--web", "0")
    url = daemon.web_url()
    port = re.search(r":(\d+)/", url)[1]
    token = url.split("token=")[1]

    def status(path, headers=None, method="GET"):
        request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {}, method=method)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, dict(response.headers)
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers)

    assert status("/")[0] == 401
    assert status("/api/state?token=" + "0" * 64)[0] == 401
    code, headers = status("/api/state?token=" + token)
    assert code == 200
    assert "script-src 'self'" in headers.get("Content-Security-Policy", ""), headers
    assert "Access-Control-Allow-Origin" not in headers, headers
    # DNS rebinding: another name pointed at 127.0.0.1.
    assert status("/api/state?token=" + token, {"Host": f"attacker.example:{port}"})[0] == 421
    # Another site's page posting with the token it cannot know, or even with it.
    assert status("/api/answer?offer=1&answer=yes&token=" + token,
                  {"Origin": "http://attacker.example"}, "POST")[0] == 403
    assert status("/api/answer?offer=1&answer=yes&token=" + token,
                  {"Origin": f"http://127.0.0.1:{port}"}, "POST")[0] == 410
    # The address is in the status for scripts.
    shown = subprocess.run([PEERXFER, "status", "--json", "--config", daemon.config],
                           capture_output=True, text=True, timeout=30).stdout
    assert json.loads(shown)["webURL"] == url, shown


def main():
    tests = [value for name, value in sorted(globals().items()) if name.startswith("test_")]
    passed = failed = 0
    driver = browser()
    try:
        for test in tests:
            started = time.monotonic()
            try:
                test(driver)
                passed += 1
                print(f"passed {test.__name__} ({time.monotonic() - started:.1f} s)", flush=True)
            except Exception:
                failed += 1
                print(f"FAILED {test.__name__}:", flush=True)
                traceback.print_exc()
                for daemon in DAEMONS:
                    print(f"--- {daemon.name}:\n{daemon.output()[-3000:]}")
            finally:
                for daemon in DAEMONS:
                    daemon.stop()
                DAEMONS.clear()
    finally:
        driver.quit()
        shutil.rmtree(ROOT, ignore_errors=True)
    print(f"{passed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
