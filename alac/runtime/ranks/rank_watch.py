"""Faults across ranks: a rank that dies, hangs or is stopped ends the run on every other rank within
a bounded wait, with one clear line naming it and what it was doing.

Every rank runs a watch thread over the process group's key-value store (torchrun's, or rank 0's):
it counts its own heartbeat there every INTERVAL seconds and reads the others'. A rank whose process
is gone (its host's ranks are checked by process id) or whose heartbeat has not moved for the
timeout (`--rank-timeout`: a stopped or hung process; a thread beats even while its rank computes or
waits in a collective) is reported by every other rank, which then exits with EXIT_STATUS at once,
even from inside a collective that would wait on (os._exit: a collective cannot be interrupted). A
collective that fails in the main thread (gloo: "Connection closed by peer") is explained the same
way (fault()). The ranks say what they are doing (doing()): loading the data, training epoch N,
writing the outputs.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time

from alac.temporary import pid_alive

# the exit status of a rank that stops because another rank failed (alac train's 0, 2 and 3 are taken)
EXIT_STATUS = 4
INTERVAL = 1.0
# how long fault() looks for the rank behind a failed collective: a killed rank's heartbeat stops at once
FAULT_WINDOW = 3.0


class RankWatch:
    def __init__(self, store, rank, world, timeout, interval=INTERVAL):
        self.store, self.rank, self.world, self.timeout, self.interval = store, rank, world, timeout, interval
        self.others = [r for r in range(world) if r != rank]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._host = socket.gethostname()
        self._store(lambda s: s.set(f"alac/where/{rank}", f"{self._host} {os.getpid()}"))
        self.doing("starting")
        started = time.monotonic()
        # (the last heartbeat count seen, when it last moved) of every other rank
        self._seen = {r: (None, started) for r in self.others}
        self._places = {}
        self._answered = started    # when the store last answered a whole round
        self._thread = threading.Thread(target=self._watch, name="alac-rank-watch", daemon=True)
        self._thread.start()
        # a store whose host is stopped (SIGSTOP of rank 0 outside torchrun) leaves a call waiting forever
        self._deadline = threading.Thread(target=self._store_deadline, name="alac-rank-watch-store", daemon=True)
        self._deadline.start()

    def _store(self, operation):
        with self._lock:
            return operation(self.store)

    def doing(self, text):
        """Say what this rank does now (the others name it when this rank fails)."""
        self._store(lambda s: s.set(f"alac/doing/{self.rank}", text))

    def _doing(self, rank):
        try:
            return self._store(lambda s: s.get(f"alac/doing/{rank}").decode() if s.check([f"alac/doing/{rank}"])
                               else "not yet started")
        except Exception:   # the store itself may be what is gone
            return "unknown"

    def _dead_locally(self, rank):
        """Whether rank runs on this host and its process is gone."""
        if rank not in self._places:
            key = f"alac/where/{rank}"
            if not self._store(lambda s: s.check([key])):
                return False
            host, pid = self._store(lambda s: s.get(key)).decode().rsplit(" ", 1)
            self._places[rank] = (host, int(pid))
        host, pid = self._places[rank]
        return host == self._host and not pid_alive(pid)

    def _beats(self):
        """{rank: heartbeat count} of the others (add 0 reads without waiting for a missing key)."""
        return {r: self._store(lambda s, r=r: s.add(f"alac/beat/{r}", 0)) for r in self.others}

    def _done(self, rank):
        return self._store(lambda s: s.check([f"alac/done/{rank}"]))

    def _silent(self, now, window):
        """The first other rank that is gone or whose heartbeat has not moved for `window` seconds (a rank
        that finished its run is neither)."""
        for rank, count in self._beats().items():
            last, moved = self._seen[rank]
            if count != last:
                self._seen[rank] = (count, now)
            elif (now - moved > window or self._dead_locally(rank)) and not self._done(rank):
                return rank, now - moved
        return None

    def _watch(self):
        while not self._stop.wait(self.interval):
            try:
                self._store(lambda s: s.add(f"alac/beat/{self.rank}", 1))
                found = self._silent(time.monotonic(), self.timeout)
            except Exception as error:
                if self._stop.is_set():
                    return      # the run ended: the store's host may have gone first
                self._end(self._store_gone(error))
                return
            self._answered = time.monotonic()
            if found is not None:
                rank, seconds = found
                self._end(self._about(rank, seconds))
                return

    def _store_deadline(self):
        while not self._stop.wait(self.interval):
            if time.monotonic() - self._answered > self.timeout + 2 * self.interval and not self._stop.is_set():
                self._end(f"the store the ranks meet at has not answered for {self.timeout:g} s: its host (rank 0, "
                          "or torchrun) has failed or is stopped")

    @staticmethod
    def _store_gone(error):
        return (f"the store the ranks meet at stopped answering ({type(error).__name__}): its host (rank 0, or "
                "torchrun) has failed")

    def _about(self, rank, seconds):
        gone = "its process is gone" if self._dead_locally(rank) else f"silent for {seconds:.0f} s"
        return f"rank {rank} failed ({gone}) while {self._doing(rank)}"

    def _end(self, what):
        self._say(f"alac: error: {what}: rank {self.rank} stops too (--rank-timeout {self.timeout:g} s)")
        os._exit(EXIT_STATUS)

    @staticmethod
    def _say(line):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        print(line, file=sys.stderr, flush=True)

    def fault(self, error):
        """A collective of this rank failed (error): name the rank behind it (the first whose process is
        gone or whose heartbeat stops within FAULT_WINDOW) and exit."""
        first = str(error).strip().splitlines()[0][:200] if str(error).strip() else type(error).__name__
        deadline = time.monotonic() + FAULT_WINDOW
        found, what = None, f"a collective failed ({first})"
        try:
            self._silent(time.monotonic(), FAULT_WINDOW)
            while found is None and time.monotonic() < deadline:
                time.sleep(self.interval / 2)
                found = self._silent(time.monotonic(), FAULT_WINDOW - 0.5)
        except Exception as store_error:
            what = self._store_gone(store_error)
        self._end(self._about(*found) if found is not None else what)

    def stop(self):
        """This rank finished its run: the others no longer watch it, nor it them."""
        self._stop.set()
        self._thread.join(timeout=2 * self.interval)
        self._deadline.join(timeout=2 * self.interval)
        try:
            self._store(lambda s: s.set(f"alac/done/{self.rank}", "1"))
        except Exception:
            pass
