#!/usr/bin/env python3
"""The cluster end to end (docs/scale-out.md): a real etcd, a real NATS, two (for a while
three) `mmrt serve --cluster-etcd --cluster-nats` workers on the tiny checkpoint and
`mmrt router`, all on loopback, each in its own process.

Checks: load gauges reach the router, forged or malformed ones are ignored, a far busier
affinity worker is passed over; the router's answers equal a worker's own (whole and
streamed); every turn of a conversation lands on one worker and conversations spread over
both, with a prefix-cache hit rate above round-robin's; a request every worker refuses is
refused by the router with the worker's reason at once; malformed etcd values and a worker of
another model are not used; a cut router-worker link passes the request on at once, a cut
worker-etcd link drops the worker from the view until it registers again; a worker frozen past
its lease is dropped and rejoins when it wakes; a worker killed with -9 mid-stream: the stream
completes on the other worker, text equal to an undisturbed run; NATS restarted; with etcd
killed the router routes on its last view and says so in /health and /metrics.
Usage: cluster_test.py --mmrt BIN --work DIR"""
import argparse
import base64
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "server"))
import http_util as hu  # noqa: E402
from server_test import Server  # noqa: E402

TTL = 2  # the workers' lease, s
MODEL = "tiny"
failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def until(what, fn, timeout):
    end = time.time() + timeout
    while time.time() < end:
        v = fn()
        if v:
            return v
        time.sleep(0.05)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


class Etcd:
    def __init__(self, work):
        exe = shutil.which("etcd") or "/usr/bin/etcd"
        if not os.path.exists(exe):
            raise RuntimeError("etcd is not installed (Debian etcd-server; scripts/setup.sh)")
        self.port, peer = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        data = os.path.join(work, "etcd-data")
        shutil.rmtree(data, ignore_errors=True)
        self.log = open(os.path.join(work, "etcd.log"), "w")
        self.proc = subprocess.Popen(
            [exe, "--name", "t", "--data-dir", data, "--listen-client-urls", self.url,
             "--advertise-client-urls", self.url, "--listen-peer-urls",
             f"http://127.0.0.1:{peer}", "--initial-advertise-peer-urls",
             f"http://127.0.0.1:{peer}", "--initial-cluster", f"t=http://127.0.0.1:{peer}"],
            stdout=self.log, stderr=subprocess.STDOUT)
        until("etcd", lambda: self.call("/v3/kv/range", {"key": b64("x")})[0] == 200, 30)

    def call(self, path, body):
        try:
            st, _, b = hu.request(self.port, "POST", path, json.dumps(body).encode(),
                                  {"Content-Type": "application/json"}, timeout=5)
            return st, json.loads(b or b"{}")
        except (OSError, ValueError):
            return 0, {}

    def put(self, key, value):
        st, _ = self.call("/v3/kv/put", {"key": b64(key), "value": b64(value)})
        assert st == 200, st

    def kill(self):
        self.proc.kill()
        self.proc.wait()


class Nats:
    def __init__(self, work, port=None):
        exe = shutil.which("nats-server") or "/usr/sbin/nats-server"
        if not os.path.exists(exe):
            raise RuntimeError("nats-server is not installed (Debian nats-server; scripts/setup.sh)")
        self.port = port or free_port()
        self.url = f"nats://127.0.0.1:{self.port}"
        self.log = open(os.path.join(work, "nats.log"), "a")
        self.proc = subprocess.Popen([exe, "-a", "127.0.0.1", "-p", str(self.port)],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        until("nats", self.answers, 20)

    def answers(self):
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1) as s:
                return s.recv(4096).startswith(b"INFO")
        except OSError:
            return False

    def publish(self, subject, payload):
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            s.recv(4096)  # INFO
            data = payload.encode()
            s.sendall(b"CONNECT {\"verbose\":false}\r\nPUB " + subject.encode() + b" " +
                      str(len(data)).encode() + b"\r\n" + data + b"\r\nPING\r\n")
            buf = b""
            while b"PONG" not in buf:
                buf += s.recv(4096)

    def kill(self):
        self.proc.kill()
        self.proc.wait()


class CutProxy:
    """A TCP proxy on loopback standing for a network link (netem is not in this kernel): it
    forwards to `target` until cut() (open connections are closed, new ones refused), and again
    after restore()."""

    def __init__(self, target=None):
        self.target = target
        self.port = free_port()
        self.conns = []
        self.lock = threading.Lock()
        self.listener = None
        self.restore()

    def restore(self):
        self.listener = socket.socket()
        self.listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.listener.bind(("127.0.0.1", self.port))
        self.listener.listen(64)
        threading.Thread(target=self._accept, args=(self.listener,), daemon=True).start()

    def cut(self):
        try:  # wakes the accept() blocked on it (close alone would leave it listening)
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        with self.lock:
            for c in self.conns:
                try:
                    c.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                c.close()
            self.conns = []

    def _accept(self, listener):
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=5)
            except OSError:
                client.close()
                continue
            with self.lock:
                self.conns += [client, upstream]
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    @staticmethod
    def _pipe(a, b):
        try:
            while True:
                d = a.recv(65536)
                if not d:
                    break
                b.sendall(d)
        except OSError:
            pass
        for x in (a, b):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def b64(s):
    return base64.b64encode(s.encode()).decode()


class Router:
    def __init__(self, mmrt, work, etcd_url, nats_url=None, extra=(), name="router"):
        self.log_path = os.path.join(work, name + ".log")
        self.log = open(self.log_path, "w")
        self.proc = subprocess.Popen([mmrt, "router", "--etcd", etcd_url, "--served-model-name",
                                      MODEL, "--port", "0", "--poll-ms", "100"] +
                                     (["--nats", nats_url] if nats_url else []) + list(extra),
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.port = until("the router to listen", self.find_port, 30)

    def find_port(self):
        if self.proc.poll() is not None:
            raise RuntimeError("the router exited: " + open(self.log_path).read())
        for line in open(self.log_path):
            if "listening on http://" in line:
                return int(line.split("http://")[1].split()[0].split(",")[0].rsplit(":", 1)[1])
        return None

    def health(self):
        st, _, b = hu.request(self.port, "GET", "/health")
        return st, json.loads(b)

    def workers(self):
        return sorted(w["id"] for w in self.health()[1].get("workers", []))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)


def bench_setup(model, prefix):
    """The benchmarks' common start (bench/cluster_*.py, bench/router_overhead.py): a work
    folder, the model's served name (its folder's) and a running etcd."""
    global MODEL
    import tempfile
    work = tempfile.mkdtemp(prefix=prefix)
    MODEL = os.path.basename(os.path.normpath(model))
    return work, MODEL, Etcd(work)


def stop_cluster(router, workers, *daemons):
    """Stops whatever of a cluster still runs: the router, the workers, then etcd / NATS."""
    if router:
        router.stop()
    for w in workers:
        if w.proc.poll() is None:
            w.stop()
    for d in daemons:
        if d.proc.poll() is None:
            d.kill()


def chat(messages, **kw):
    return json.dumps({"model": MODEL, "messages": messages, "max_tokens": 6, "temperature": 0,
                       **kw}).encode()


def post(port, body):
    st, hd, b = hu.request(port, "POST", "/v1/chat/completions", body,
                           {"Content-Type": "application/json"}, timeout=60)
    return st, {k.lower(): v for k, v in hd.items()} if isinstance(hd, dict) else hd, b


def header(hd, name):
    if isinstance(hd, dict):
        return hd.get(name)
    for k, v in hd:
        if k.lower() == name:
            return v
    return None


def prefix_hits(ports):
    q = sum(hu.metric(p, "mmrt_prefix_cache_queries_total") for p in ports)
    h = sum(hu.metric(p, "mmrt_prefix_cache_hits_total") for p in ports)
    return q, h


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mmrt", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    model = os.path.join(a.work, MODEL)
    if not os.path.exists(os.path.join(model, "config.json")):
        subprocess.run([a.mmrt, "make-tiny-model", "--arch", "qwen2-vl", "--out", model],
                       check=True, stdout=subprocess.DEVNULL)
    etcd = Etcd(a.work)
    nats = Nats(a.work)
    workers, router, extra, extra_routers = [], None, [], []
    try:
        for _ in range(2):
            # Batch-invariant: the stream resumed after kill -9 below must go on exactly as on
            # the first worker, whatever the two workers' batches and caches held.
            workers.append(Server(a.mmrt, model, a.work, "--batch-invariant", "--cluster-etcd",
                                  etcd.url,
                                  "--cluster-ttl", str(TTL), "--served-model-name", MODEL,
                                  "--cluster-nats", nats.url))
        router = Router(a.mmrt, a.work, etcd.url, nats.url)
        ids = until("both workers at the router", lambda: len(router.workers()) == 2 and
                    router.workers(), 15)
        st, h = router.health()
        check(st == 200 and h["etcd"]["ok"], f"/health: 2 workers, etcd answers ({ids})")
        loads = lambda: router.health()[1].get("nats", {}).get("loads", {})  # noqa: E731
        until("both workers' load gauges", lambda: sorted(loads()) == ids, 5)
        check(router.health()[1]["nats"]["ok"], "NATS: both workers' load gauges reach the router")

        # Forged and malformed gauges are ignored, with a log line.
        nats.publish("mmrt.load.ghost", json.dumps({"id": "ghost", "seq": 1, "waiting": 0,
                                                    "running": 0, "in_flight": 0,
                                                    "kv_usage": 0}))
        nats.publish("mmrt.load." + ids[0], "{not json")
        nats.publish("mmrt.load." + ids[0], json.dumps({"id": ids[1], "seq": 10**9, "waiting": 99,
                                                        "running": 99, "in_flight": 0,
                                                        "kv_usage": 0}))
        time.sleep(0.3)
        log = open(router.log_path).read()
        check(hu.metric(router.port, "mmrt_router_gauges_ignored_total") >= 3 and
              "no worker 'ghost' is registered" in log and "not a JSON object" in log and
              "is not its subject's" in log and loads().get(ids[1], {}).get("running", 0) < 99,
              "NATS: a gauge of an unknown worker, a malformed one and one under another "
              "worker's subject are ignored, with log lines")

        # Encoder-cache events: an image encoded on one worker (asked directly, not through the
        # router) draws other conversations about it there, whatever their affinity.
        png = os.path.join(a.work, "shared_image.png")
        hu.write_test_image(png, size=(110, 70))
        img = {"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(open(png, "rb").read()).decode()}}
        holder = workers[0]
        holder_id = next(i for i in ids if i.startswith(f"127.0.0.1:{holder.port}-"))
        about = lambda q: chat([{"role": "user", "content": [img, {"type": "text", "text": q}]}])  # noqa: E731,E501
        post(holder.port, about("What is this?"))
        until("the router's snapshot of the holder's encoder cache",
              lambda: hu.metric(router.port, "mmrt_router_media_resyncs_total") >= 1, 5)
        landed = [header(post(router.port, about(f"Question {i} about it"))[1], "x-mmrt-worker")
                  for i in range(8)]
        moves = hu.metric(router.port, "mmrt_router_media_moves_total")
        check(landed == [holder_id] * 8 and moves >= 1,
              f"NATS encoder-cache events: 8 conversations about an image one worker encoded all "
              f"go there ({moves:.0f} moved off their affinity worker)")
        # A forged batch with a gap makes the router take a snapshot: its forged entry does not
        # stick; a malformed batch and one under another worker's subject are ignored.
        resyncs = hu.metric(router.port, "mmrt_router_media_resyncs_total")
        ignored = hu.metric(router.port, "mmrt_router_media_events_ignored_total")
        nats.publish("mmrt.media." + holder_id, json.dumps({
            "id": holder_id, "snapshot": False, "first": 10**6, "last": 10**6,
            "ops": ["+" + "ab" * 16]}))
        nats.publish("mmrt.media." + holder_id, "{not json")
        nats.publish("mmrt.media." + ids[1 - ids.index(holder_id)], json.dumps({
            "id": holder_id, "snapshot": False, "first": 1, "last": 1, "ops": ["-" + "cd" * 16]}))
        until("the resync", lambda: hu.metric(router.port, "mmrt_router_media_resyncs_total")
              > resyncs, 5)
        again = [header(post(router.port, about(f"Later question {i}"))[1], "x-mmrt-worker")
                 for i in range(4)]
        check(again == [holder_id] * 4 and
              hu.metric(router.port, "mmrt_router_media_events_ignored_total") >= ignored + 2,
              "NATS encoder-cache events: a forged batch with a gap makes the router resync from "
              "the worker (the image still routes there); malformed and misaddressed batches are "
              "ignored")

        # A far busier affinity worker: the request goes to the other.
        conv_b = [{"role": "user", "content": "Which worker am I on?"}]
        busy_id = header(post(router.port, chat(conv_b))[1], "x-mmrt-worker")
        busy = next(w for w in workers if busy_id.startswith(f"127.0.0.1:{w.port}-"))
        hold = []
        for i in range(12):
            sk = socket.create_connection(("127.0.0.1", busy.port), timeout=60)
            sk.sendall(hu.raw(busy.port, "POST", "/v1/chat/completions", chat(
                [{"role": "user", "content": f"hold {i}"}], stream=True, max_tokens=4000,
                ignore_eos=True)))
            hold.append(sk)
        until("the busy worker's gauge", lambda: loads().get(busy_id, {}).get("running", 0) >= 10, 5)
        moved = header(post(router.port, chat(conv_b))[1], "x-mmrt-worker")
        for sk in hold:
            sk.close()
        # Closed connections cancel their requests: the load goes.
        until("the held streams to be cancelled",
              lambda: loads().get(busy_id, {}).get("running", 99) <= 1, 10)
        check(moved != busy_id and hu.metric(router.port, "mmrt_router_load_overrides_total") >= 1,
              f"NATS: with 12 streams on its affinity worker, a conversation's turn goes to the "
              f"other worker ({moved})")

        # The same answer as a worker's own, whole and streamed.
        conv = [{"role": "user", "content": "Tell me about routers."}]
        st, hd, b = post(router.port, chat(conv))
        via = json.loads(b)["choices"][0]["message"]["content"] if st == 200 else None
        direct = [json.loads(post(w.port, chat(conv))[2])["choices"][0]["message"]["content"]
                  for w in workers]
        check(st == 200 and via == direct[0] == direct[1],
              f"greedy answer through the router equals each worker's ({via!r})")
        check(header(hd, "x-mmrt-worker") in ids, "x-mmrt-worker names a registered worker")
        st, hd, b = post(router.port, chat(conv, stream=True))
        events = hu.sse_events(b) if st == 200 else []
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                       if isinstance(e, dict) and e.get("choices"))
        check(st == 200 and text == via and b.rstrip().endswith(b"data: [DONE]"),
              "streamed through the router: the same text, ends with [DONE]")

        # Affinity: every turn of a conversation on one worker; a better prefix-cache hit rate
        # than round-robin over the same workers.
        def conversation(i, send):
            msgs = [{"role": "system", "content": f"You are assistant number {i}. " * 8},
                    {"role": "user", "content": f"Question {i}: what is a cache? " * 4}]
            where = []
            for turn in range(3):
                st, hd, b = send(turn, chat(msgs))
                if st != 200:
                    return None
                where.append(header(hd, "x-mmrt-worker"))
                msgs += [{"role": "assistant",
                          "content": json.loads(b)["choices"][0]["message"]["content"]},
                         {"role": "user", "content": f"And turn {turn + 1}?"}]
            return where
        ports = [w.port for w in workers]
        q0, h0 = prefix_hits(ports)
        placed = [conversation(i, lambda t, body: post(router.port, body)) for i in range(12)]
        q1, h1 = prefix_hits(ports)
        rr = [conversation(100 + i, lambda t, body, i=i: post(ports[(i + t) % 2], body))
              for i in range(12)]
        q2, h2 = prefix_hits(ports)
        sticky = all(p and len(set(p)) == 1 for p in placed)
        spread = len({p[0] for p in placed if p}) == 2
        routed_rate, rr_rate = (h1 - h0) / max(1, q1 - q0), (h2 - h1) / max(1, q2 - q1)
        check(sticky and spread, "each of 12 conversations stays on one worker; both are used")
        check(all(rr) and routed_rate > rr_rate,
              f"prefix-cache hit rate through the router {routed_rate:.1%} > round-robin "
              f"{rr_rate:.1%} (3 turns, 12 conversations)")

        # KV-aware routing (a second router, with the model): each prompt's prefix-cache block
        # keys computed as the workers compute them, matched against the keys they publish.
        kvr = Router(a.mmrt, a.work, etcd.url, nats.url, ["--model", model], name="kv_router")
        extra_routers.append(kvr)
        until("both workers at the KV router", lambda: kvr.workers() == ids, 15)
        png2 = os.path.join(a.work, "kv_image.png")
        hu.write_test_image(png2, size=(150, 90))
        img2 = {"type": "image_url", "image_url": {
            "url": "data:image/png;base64," + base64.b64encode(open(png2, "rb").read()).decode()}}
        exact, landed_kv = [], []
        for i in range(6):
            holder = workers[i % 2]
            holder_id = next(x for x in ids if x.startswith(f"127.0.0.1:{holder.port}-"))
            msgs = [{"role": "system", "content": f"KV conversation {i}. " * 6},
                    {"role": "user", "content": [img2, {"type": "text",
                                                        "text": f"Describe image {i}."}]}]
            st, _, b = post(holder.port, chat(msgs))  # the first turn straight to the holder
            msgs += [{"role": "assistant",
                      "content": json.loads(b)["choices"][0]["message"]["content"]},
                     {"role": "user", "content": f"And what else, {i}?"}]
            time.sleep(0.4)  # the holder's next batch of events (every 100 ms) reaches the router
            st, hd, b = post(kvr.port, chat(msgs))
            predicted = header(hd, "x-mmrt-predicted-cached-tokens")
            got = json.loads(b)["usage"]["prompt_tokens_details"]["cached_tokens"] if st == 200 \
                else None
            landed_kv.append(header(hd, "x-mmrt-worker") == holder_id)
            exact.append((predicted, got))
        check(all(landed_kv) and hu.metric(kvr.port, "mmrt_router_kv_routed_total") >= 6,
              f"KV-aware routing: the second turn of 6 image conversations, each begun on one "
              f"worker or the other, goes to the worker holding its prefix "
              f"({hu.metric(kvr.port, 'mmrt_router_kv_moves_total'):.0f} moved off their "
              f"affinity worker; landed on the holder: {landed_kv})")
        check(all(p is not None and g is not None and int(p) == g and g > 0 for p, g in exact),
              f"KV-aware routing: the router's predicted cached tokens equal the worker's "
              f"(image in the block chain, tenant salt, template and tokens): {exact}")
        # With the model the router prices the request's own work: work alone over its promise
        # is refused with no retry hint, as a worker refuses it.
        st, hd, b = post(kvr.port, chat([{"role": "user", "content": "price me " * 200}],
                                        sla_class="platinum", ttft_deadline_ms=0.01))
        err = json.loads(b).get("error", {}) if b else {}
        check(st == 429 and "its own work alone" in err.get("message", "") and
              "predicted by the router" in err.get("message", "") and
              header(hd, "retry-after") is None and header(hd, "x-should-retry") == "false",
              f"the KV router prices a request's own work: over its promise alone, refused with "
              f"no retry hint ({err.get('message')!r})")
        # Forged and malformed prefix-cache events: a gap makes the router resync; the others
        # are ignored with a log line.
        resyncs = hu.metric(kvr.port, "mmrt_router_kv_resyncs_total")
        nats.publish("mmrt.kv." + ids[0], json.dumps({
            "id": ids[0], "snapshot": False, "first": 10**6, "last": 10**6,
            "ops": ["+" + "ef" * 16]}))
        nats.publish("mmrt.kv." + ids[0], "{not json")
        until("the KV resync", lambda: hu.metric(kvr.port, "mmrt_router_kv_resyncs_total")
              > resyncs, 5)
        check(hu.metric(kvr.port, "mmrt_router_kv_events_ignored_total") >= 1 and
              "prefix-cache events" in open(kvr.log_path).read(),
              "NATS prefix-cache events: a forged batch with a gap makes the router resync, a "
              "malformed one is ignored with a log line")

        # Admission at the router: the workers' quotes (with their gauges) predict each request's
        # first token; a request no worker can serve in time is refused by the router itself,
        # at once, without trying a worker.
        until("both workers' quotes at the router",
              lambda: all("platinum" in loads().get(i, {}).get("ahead_ms", {}) for i in ids), 5)
        passed, tried = (hu.metric(router.port, "mmrt_router_passed_on_total"),
                         sum(hu.metric(w.port, "mmrt_request_outcome_total") for w in workers))
        t0 = time.perf_counter()
        st, hd, b = post(router.port, chat(conv, ttft_deadline_ms=0.001))
        ms = (time.perf_counter() - t0) * 1e3
        err = json.loads(b).get("error", {}) if b else {}
        check(st == 429 and "predicted by the router" in err.get("message", "") and
              "before its own prompt" in err.get("message", "") and
              header(hd, "retry-after") is not None and
              hu.metric(router.port, "mmrt_router_ttft_refused_total") >= 1 and
              hu.metric(router.port, "mmrt_router_passed_on_total") == passed and
              sum(hu.metric(w.port, "mmrt_request_outcome_total") for w in workers) == tried,
              f"a request no worker can serve in time: the router refuses it at once from the "
              f"workers' quotes, no worker tried ({ms:.1f} ms; {err.get('message')!r})")
        st, hd, b = post(router.port, chat(conv, sla_class="platinum"))
        mm = json.loads(b).get("mmrt", {}) if st == 200 else {}
        predicted = header(hd, "x-mmrt-predicted-ttft-ms")
        check(st == 200 and predicted is not None and
              abs(float(predicted) - mm.get("predicted_ttft_ms", -1e9)) <=
              max(20.0, mm.get("predicted_ttft_ms", 0)),
              f"the router's predicted first token ({predicted} ms, its queue alone without the "
              f"model) agrees with the worker's own prediction ({mm.get('predicted_ttft_ms')} ms)")
        # A router without NATS has no quotes: admission is the workers', their refusal passed on.
        plain = Router(a.mmrt, a.work, etcd.url, None, name="plain_router")
        extra_routers.append(plain)
        until("both workers at the plain router", lambda: plain.workers() == ids, 15)
        t0 = time.perf_counter()
        st, hd, b = post(plain.port, chat(conv, ttft_deadline_ms=0.001))
        ms = (time.perf_counter() - t0) * 1e3
        err = json.loads(b).get("error", {}) if b else {}
        check(st == 429 and "cannot serve it" in err.get("message", "") and
              hu.metric(plain.port, "mmrt_router_passed_on_total") >= 1,
              f"without quotes, every worker tried and the last refusal passed on at once "
              f"({ms:.0f} ms)")

        # Bad values and a worker of another model are not used.
        etcd.put("/mmrt/workers/garbage", "{not json")
        etcd.put("/mmrt/workers/other", json.dumps({"id": "other", "url": "http://127.0.0.1:1",
                                                    "model": "another-model"}))
        time.sleep(0.5)
        log = open(router.log_path).read()
        check(router.workers() == ids and "ignoring /mmrt/workers/garbage" in log and
              "serves 'another-model'" in log,
              "a malformed value and a worker of another model: ignored, with a log line")

        # Cut links (a proxy stands for each: netem is not in this kernel). A third worker is
        # reached by the router through one proxy and reaches etcd through another.
        to_worker, to_etcd = CutProxy(), CutProxy(etcd.port)
        third = Server(a.mmrt, model, a.work, "--cluster-etcd", f"http://127.0.0.1:{to_etcd.port}",
                       "--cluster-ttl", str(TTL), "--served-model-name", MODEL,
                       "--advertise-url", f"http://127.0.0.1:{to_worker.port}")
        extra.append(third)  # stopped in `finally` too, should a check below raise
        to_worker.target = third.port
        until("the third worker at the router", lambda: len(router.workers()) == 3, 10)
        third_id = next(i for i in router.workers() if i not in ids)
        conv3 = next(c for c in ([{"role": "user", "content": f"link test {i}"}] for i in range(64))
                     if header(post(router.port, chat(c))[1], "x-mmrt-worker") == third_id)
        to_worker.cut()
        st, hd, _ = post(router.port, chat(conv3))
        passed = st == 200 and header(hd, "x-mmrt-worker") != third_id
        to_worker.restore()
        back = header(post(router.port, chat(conv3))[1], "x-mmrt-worker") == third_id
        check(passed and back, "router-worker link cut: the conversation is served by another "
              "worker at once; restored: back on its own")
        to_etcd.cut()
        t0 = time.time()
        until("the cut-off worker to leave the router's view", lambda: len(router.workers()) == 2,
              TTL + 5)
        left_s = time.time() - t0
        still = hu.request(third.port, "GET", "/health")[0] == 200
        to_etcd.restore()
        until("the cut-off worker to rejoin", lambda: len(router.workers()) == 3, TTL + 10)
        log = open(third.log_path).read()
        check(still and "lease lapsed" in log,
              f"worker-etcd link cut: dropped from the router's view after {left_s:.1f} s, kept "
              "serving what reached it; restored: told its lease was gone, registered again")
        third.stop()
        until("the third worker to leave", lambda: len(router.workers()) == 2, TTL + 5)

        # Frozen past its lease: dropped; served by the other; back when it wakes.
        frozen = workers[0]
        os.kill(frozen.proc.pid, signal.SIGSTOP)
        t0 = time.time()
        until("the frozen worker to be dropped", lambda: len(router.workers()) == 1, TTL + 5)
        dropped_s = time.time() - t0
        ok = all(post(router.port, chat([{"role": "user", "content": f"while frozen {i}"}]))[0]
                 == 200 for i in range(4))
        os.kill(frozen.proc.pid, signal.SIGCONT)
        until("the woken worker to rejoin", lambda: len(router.workers()) == 2, TTL + 10)
        check(ok, f"SIGSTOP past the lease: dropped after {dropped_s:.1f} s (TTL {TTL} s), the "
              "other worker serves, it rejoins after SIGCONT")

        # kill -9 mid-stream: the stream completes on the other worker (it continues from the
        # token ids the client has), the dead worker is dropped within its TTL, and the other
        # serves on.
        long = chat([{"role": "user", "content": "Tell me a long story."}], stream=True,
                    max_tokens=1000, ignore_eos=True, temperature=0,
                    stream_options={"include_usage": True})
        st, hd, b = post(router.port, long)
        reference = "".join(e["choices"][0]["delta"].get("content") or ""
                            for e in hu.sse_events(b) if isinstance(e, dict) and e.get("choices"))
        serving = header(hd, "x-mmrt-worker")
        victim = next(w for w in workers if serving and serving.startswith(f"127.0.0.1:{w.port}-"))
        sock = socket.create_connection(("127.0.0.1", router.port), timeout=60)
        sock.sendall(hu.raw(router.port, "POST", "/v1/chat/completions", long))
        buf = b""
        while buf.count(b"data: ") < 3:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
        victim.proc.kill()
        victim.proc.wait()
        t0 = time.time()
        st2, _, b2, _ = hu.read_response(sock, buf)
        sock.close()
        events = hu.sse_events(b2)
        text = "".join(e["choices"][0]["delta"].get("content") or "" for e in events
                       if isinstance(e, dict) and e.get("choices"))
        roles = sum(1 for e in events if isinstance(e, dict) and e.get("choices") and
                    "role" in e["choices"][0]["delta"])
        ids = {e.get("id") for e in events if isinstance(e, dict) and e.get("id")}
        usage = [e["usage"] for e in events if isinstance(e, dict) and e.get("usage")]
        leaked = any("mmrt_ids" in e for e in events if isinstance(e, dict))
        check(st == 200 and st2 == 200 and len(reference) > 100 and text == reference and
              roles == 1 and len(ids) == 1 and events[-1] == "[DONE]" and not leaked and
              len(usage) == 1 and usage[0]["completion_tokens"] == 1000 and
              hu.metric(router.port, "mmrt_router_resumed_total") >= 1,
              f"kill -9 mid-stream: the stream completes on the other worker from the tokens "
              f"the client has, text equal to an undisturbed run ({len(reference)} chars), one "
              f"id, one role chunk, one [DONE], usage {usage}, no token ids leaked")
        until("the killed worker to be dropped", lambda: len(router.workers()) == 1, TTL + 5)
        dropped_s = time.time() - t0
        sts = [post(router.port, chat([{"role": "user", "content": f"after kill {i}"}]))[0]
               for i in range(4)]
        check(dropped_s <= TTL + 1 and sts == [200] * 4,
              f"kill -9: dropped after {dropped_s:.1f} s, requests served by the other worker")

        # NATS restarted: the gauges come back without restarting anyone.
        nats.kill()
        until("the router to see NATS gone", lambda: not router.health()[1]["nats"]["ok"], 5)
        nats = Nats(a.work, nats.port)
        until("the gauges after the restart",
              lambda: router.health()[1]["nats"]["ok"] and len(loads()) == len(router.workers()),
              10)
        check(True, "NATS restarted: the router reconnects and the gauges resume")
        # ... and the prefix-cache events: a conversation begun after the restart is predicted
        # exactly (batches the router missed while NATS was away show it a gap and it resyncs;
        # libnats may also have held a worker's batches and sent them on reconnecting).
        live = next(w for w in workers if w.proc.poll() is None)
        msgs = [{"role": "system", "content": "After the restart. " * 8},
                {"role": "user", "content": [img2, {"type": "text", "text": "Describe it."}]}]
        st, _, b = post(live.port, chat(msgs))
        msgs += [{"role": "assistant", "content": json.loads(b)["choices"][0]["message"]["content"]},
                 {"role": "user", "content": "Go on."}]
        time.sleep(1.5)  # the next batches, or a gap and the resync it asks for (<= 0.5 s)
        st, hd, b = post(kvr.port, chat(msgs))
        predicted = header(hd, "x-mmrt-predicted-cached-tokens")
        got = json.loads(b)["usage"]["prompt_tokens_details"]["cached_tokens"] if st == 200 else -1
        check(predicted is not None and int(predicted) == got > 0,
              f"NATS restarted: the KV router follows the workers' prefix caches again and predicts "
              f"a new conversation's cached tokens exactly ({predicted} = {got}, "
              f"{hu.metric(kvr.port, 'mmrt_router_kv_resyncs_total'):.0f} resyncs in all)")

        # etcd gone: routing on the last view, said so.
        etcd.kill()
        time.sleep(0.5)
        st, h = router.health()
        served = post(router.port, chat([{"role": "user", "content": "etcd is gone"}]))[0]
        check(st == 200 and not h["etcd"]["ok"] and "last view" in h["status"] and served == 200
              and hu.metric(router.port, "mmrt_router_etcd_up") == 0,
              "etcd killed: the router serves from its last view, /health and /metrics say so")
    finally:
        for r in extra_routers:
            if r.proc.poll() is None:
                r.stop()
        stop_cluster(router, workers + extra, etcd, nats)
    if failures:
        print(f"{len(failures)} failed", file=sys.stderr)
        sys.exit(1)
    print("all cluster checks passed")


if __name__ == "__main__":
    main()
