"""One reader for every streamed response body of a generator process: thousands of streams per core.

Imports gevent: use it only in the Locust process.

A streamed response is mostly waiting for its next chunk. Read by the
greenlet that sent the request, every chunk costs a trip through gevent's
hub: start an I/O watcher, switch to the hub, poll, call back, switch back,
then a ``recv`` through gevent's socket wrapper — more than the chunk's own
parsing. :class:`StreamReader` instead keeps one ``epoll`` set of every
stream's socket and one greenlet that waits for that set to be readable,
takes every ready socket in one ``epoll_wait``, and for each does one
non-blocking ``recvmsg`` on the raw socket, feeds geventhttpclient's parser
and the chunk consumer (:class:`~.streams.ChunkTimer` or
:class:`~.openai_stream.OpenAIReply`), and wakes the request's greenlet only
when its body is complete or failed. Reads are timed with the kernel's
receive stamp (:mod:`.arrival_stamps`), so a ready socket that waited for the
rest of its batch is still timed when its chunk arrived.

Guarantees:

- Every read of a stream is fed in arrival order, with its time (epoch ns on
  the run clock; the kernel stamp where there is one, else the clock after
  the read), exactly as the per-greenlet read did.
- A stream leaves the set when its body completes, its connection closes or
  errs (the request's greenlet gets ``HTTPConnectionClosed``, or the
  ``OSError``/``HTTPParseError``, as from its own read), or the request's
  greenlet leaves the wait for any reason (its timeout, a kill): the caller's
  ``finally`` forgets the socket, so a socket is never read for a request
  that is gone.
- The reader greenlet ends when the set is empty (a requester that leaves
  the set empty wakes it through an ``eventfd`` in the set) and is started
  again by the next stream, so nothing of it outlives the load.

Not used for TLS connections (the raw socket carries ciphertext) or where
``select.epoll`` is missing: :func:`read_stream` then reads in the request's
greenlet, as before.
"""

from __future__ import annotations

import os
import select

import gevent
import gevent.event
import gevent.monkey
from geventhttpclient.response import HTTPConnectionClosed

from tailscope.loadgen import arrival_stamps
from tailscope.loadgen.clock import RunClock

#: Most ready sockets taken from one ``epoll_wait``; the rest are taken by the next.
MAX_READY = 1024


def _original_epoll():
    """The OS's ``select.epoll`` (None where there is none): gevent's monkey-patching, which
    Locust applies, removes it from ``select``, since a blocking ``epoll_wait`` would stall the
    loop. The reader never blocks in it: ``poll(0)``, after gevent said the set is readable."""
    try:
        return gevent.monkey.get_original("select", "epoll")
    except AttributeError:
        return None


_EPOLL = _original_epoll()


class _Stream:
    """A response being read: its parser, its consumer and how its requester is woken."""

    __slots__ = ("response", "chunks", "raw", "stamped", "done")

    def __init__(self, response, chunks, raw, stamped: bool) -> None:
        self.response = response
        self.chunks = chunks
        self.raw = raw  # the OS-level socket (non-blocking) under gevent's wrapper
        self.stamped = stamped
        self.done = gevent.event.AsyncResult()


class StreamReader:
    """Reads every registered stream's body in one greenlet (see the module docstring)."""

    def __init__(self, clock: RunClock) -> None:
        self._clock = clock
        self._epoll = _EPOLL()
        self._wake = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self._epoll.register(self._wake, select.EPOLLIN)
        self._streams: dict[int, _Stream] = {}
        self._greenlet: gevent.Greenlet | None = None

    @staticmethod
    def available() -> bool:
        """Whether this platform has what the reader needs (``epoll`` and ``eventfd``: Linux)."""
        return _EPOLL is not None and hasattr(os, "eventfd")

    def read(self, response, chunks) -> None:
        """Block the calling greenlet until ``response``'s body is complete, feeding ``chunks``.

        Raises what reading raises (``HTTPConnectionClosed``, ``OSError``,
        ``HTTPParseError``); a timeout or kill of the calling greenlet
        removes the stream and propagates."""
        sock = response._sock
        if sock is None:
            raise HTTPConnectionClosed("connection closed before the end of the stream")
        raw = sock._sock
        stream = _Stream(response, chunks, raw, arrival_stamps.enable(raw))
        fd = raw.fileno()
        self._streams[fd] = stream
        self._epoll.register(fd, select.EPOLLIN)
        if self._greenlet is None or self._greenlet.dead:
            self._greenlet = gevent.spawn(self._run)
        try:
            stream.done.get()
        finally:
            if self._forget(fd, stream) and not self._streams:
                os.eventfd_write(self._wake, 1)  # left early (timeout, kill): let an idle reader end

    def _forget(self, fd: int, stream: _Stream) -> bool:
        """Take ``stream`` out of the set; whether it was still in it."""
        if self._streams.get(fd) is not stream:
            return False
        del self._streams[fd]
        try:
            self._epoll.unregister(fd)
        except OSError:  # closed meanwhile: the kernel dropped it from the set already
            pass
        return True

    def _run(self) -> None:
        hub = gevent.get_hub()
        watcher = hub.loop.io(self._epoll.fileno(), 1)
        try:
            while self._streams:
                hub.wait(watcher)
                offset_ns = arrival_stamps.wall_offset_ns(self._clock)
                for fd, _events in self._epoll.poll(0, MAX_READY):
                    stream = self._streams.get(fd)
                    if stream is not None:
                        self._read_one(fd, stream, offset_ns)
                    elif fd == self._wake:
                        try:
                            os.eventfd_read(self._wake)
                        except BlockingIOError:
                            pass
        finally:
            watcher.close()

    def _read_one(self, fd: int, stream: _Stream, offset_ns: int) -> None:
        """One non-blocking read of a ready stream; ends it when its body is complete or failed.
        ``offset_ns``: run clock minus wall clock (:func:`~.arrival_stamps.wall_offset_ns`)."""
        response = stream.response
        try:
            if stream.stamped:
                data, ancillary, _flags, _address = stream.raw.recvmsg(response.block_size, arrival_stamps.STAMP_SPACE)
            else:
                data, ancillary = stream.raw.recv(response.block_size), None
        except BlockingIOError:
            return
        except OSError as exc:
            self._end(fd, stream, exc)
            return
        t_ns = arrival_stamps.arrival_ns(ancillary, offset_ns) if ancillary else None
        if t_ns is None:
            t_ns = self._clock.now_ns()
        if not data:
            response.release()
            self._end(fd, stream, HTTPConnectionClosed("connection closed before the end of the stream"))
            return
        buffer = response._body_buffer
        try:
            response.feed(data)  # completing the message returns the socket to the pool
        except Exception as exc:  # noqa: BLE001  (a parse error fails this request, not the reader)
            self._end(fd, stream, exc)
            return
        if buffer:
            stream.chunks.feed(bytes(buffer), t_ns)
            del buffer[:]
        if response.message_complete:
            self._end(fd, stream, None)

    def _end(self, fd: int, stream: _Stream, error: BaseException | None) -> None:
        self._forget(fd, stream)
        if error is None:
            stream.done.set(None)
        else:
            stream.done.set_exception(error)
