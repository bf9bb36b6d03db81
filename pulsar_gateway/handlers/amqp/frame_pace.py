"""How long an AMQP connection may take to finish a frame it has begun (issue 33, "timeouts
on half-sent frames").

A frame's bytes come at the network's pace: a client writes a frame at once. Two bounds, as
on the Kafka listener (docs/security.md, "Threat model"):

- no byte for `amqp.frame_timeout_seconds` (30 s): the frame stalled;
- once `amqp.frame_grace_seconds` (5 s) have passed since the frame began, its bytes must
  average `amqp.min_frame_bytes_per_second` over the time beyond the grace: a frame
  trickled a byte every 20 s never stalls, yet held its connection, its buffer (up to
  `frame_max`) and its slot for as long as the client liked.

Sans-I/O: the session (session.py) tells it what each read brought and how much of an
unfinished frame its frame reader holds, and asks for the deadline of its next read.
Frames that follow one another without a pause count as one run: a client streaming large
messages keeps a frame under way all the time, at a rate far over the floor.
"""

from __future__ import annotations

from dataclasses import dataclass

NOT_UNDER_WAY = float("inf")


@dataclass
class FramePace:
    stall_seconds: float  # amqp.frame_timeout_seconds
    grace_seconds: float  # amqp.frame_grace_seconds
    min_bytes_per_second: int  # amqp.min_frame_bytes_per_second
    began: float = NOT_UNDER_WAY  # when the unfinished frame (or run of frames) began
    received: int = 0  # its bytes since then
    last_progress: float = NOT_UNDER_WAY

    def read(self, now: float, size: int, unfinished: int) -> None:
        """A read brought ``size`` bytes, after which ``unfinished`` bytes of a frame not
        yet complete are buffered (0: none)."""
        if not unfinished:
            self.began = self.last_progress = NOT_UNDER_WAY
            return
        if self.began == NOT_UNDER_WAY:
            self.began, self.received = now, unfinished
        else:
            self.received += size
        self.last_progress = now

    def restart(self, now: float) -> None:
        """The socket was not read for a while (backpressure, the connection blocked): that
        time is the gateway's, not the client's, so the frame's clock starts again."""
        if self.began != NOT_UNDER_WAY:
            self.began = self.last_progress = now
            self.received = 0

    def deadline(self) -> float | None:
        """When the next read must have brought bytes by; None: no frame under way."""
        if self.began == NOT_UNDER_WAY:
            return None
        slow = self.began + self.grace_seconds + self.received / self.min_bytes_per_second
        return min(self.last_progress + self.stall_seconds, slow)

    def why(self, now: float) -> str:
        """Why the frame is given up at ``now``, naming the settings."""
        if now - self.last_progress >= self.stall_seconds:
            return (
                f"a frame stalled, no bytes for {self.stall_seconds:g} s "
                "(amqp.frame_timeout_seconds)"
            )
        return (
            f"a frame arriving under {self.min_bytes_per_second} B/s after "
            f"{self.grace_seconds:g} s (amqp.min_frame_bytes_per_second, "
            "amqp.frame_grace_seconds)"
        )
