"""One small registry for every plug-in kind: named members, in the order they were registered.

Every kind of plug-in in tailscope — cause detectors, samplers, fault injectors,
scenario sections, arrival processes, stage presets, … — has one *declaring module*
that creates its :class:`Registry` and registers every member explicitly, in one
place::

    # analyzers/causes/registry.py
    DETECTORS = Registry("cause detector", key=lambda detector: detector.kind)
    DETECTORS.register(GcDetector)
    DETECTORS.register(CpuThrottlingDetector)

A member module (``detect_gc.py``) only defines its plug-in; importing it changes
nothing. Importing the declaring module fills its registry, and nothing else
does, so what exists is read in one file and does not depend on which modules
happen to have been imported.

Guarantees:

- **Named.** Every member has a non-empty string name: the ``name`` given to
  :meth:`Registry.register`, else ``key(member)``. A second member with a taken
  name raises :class:`ValueError` ("... is already registered").
- **Ordered.** Iteration (names), :meth:`~Registry.names`, ``values()`` and
  ``items()`` follow registration order, so a declaring module states the order
  its consumers see (e.g. the order causes are listed).
- **Clear lookup.** ``registry[name]`` returns the member or raises
  :class:`UnknownName` (a :class:`KeyError`), whose message names the kind and
  lists the known names: ``unknown fault kind 'nope'; known: cpu_throttle, …``.
  ``name in registry`` and ``registry.get(name)`` do not raise.
- **Plain.** A registry is a read-only :class:`~collections.abc.Mapping` once
  filled: it stores what it is given (classes, functions, factories), creates
  no instance, imports nothing and holds no global state beyond the module-level
  value its declaring module creates.

Registration is meant for import time (not thread-safe against concurrent readers).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TypeVar, overload

T = TypeVar("T")


class UnknownName(KeyError):
    """A registry has no member by this name; the message lists the known names."""

    def __init__(self, kind: str, name: object, known: tuple[str, ...]):
        super().__init__(name)
        self.kind = kind
        self.name = name
        self.known = known

    def __str__(self) -> str:
        return f"unknown {self.kind} {self.name!r}; known: {', '.join(self.known) or 'none'}"


class Registry(Mapping[str, T]):
    """Named plug-ins of one ``kind`` (e.g. ``"sampler"``), in registration order (see the module docstring).

    ``key`` names a member registered without an explicit ``name`` (e.g. its ``kind``
    attribute); without ``key`` every registration must give ``name``.
    """

    def __init__(self, kind: str, key: Callable[[T], str] | None = None):
        self.kind = kind
        self._key = key
        self._members: dict[str, T] = {}

    @overload
    def register(self, member: T, /, *, name: str | None = None) -> T: ...

    @overload
    def register(self, member: None = None, /, *, name: str | None = None) -> Callable[[T], T]: ...

    def register(self, member=None, /, *, name=None):
        """Add ``member`` under ``name`` (default ``key(member)``) and return it.

        Called without a member it returns a decorator: ``@registry.register`` or
        ``@registry.register(name="poisson")``. Raises ValueError for a taken name,
        TypeError when no name can be found.
        """
        if member is None:
            return lambda decorated: self.register(decorated, name=name)
        if name is None:
            if self._key is None:
                raise TypeError(f"register a {self.kind} with name=...: this registry has no key function")
            name = self._key(member)
        if not isinstance(name, str) or not name:
            raise TypeError(f"a {self.kind}'s name must be a non-empty string, got {name!r}")
        if name in self._members:
            raise ValueError(f"a {self.kind} named {name!r} is already registered")
        self._members[name] = member
        return member

    def names(self) -> tuple[str, ...]:
        """Every name, in registration order."""
        return tuple(self._members)

    def __getitem__(self, name: str) -> T:
        try:
            return self._members[name]
        except KeyError:
            raise UnknownName(self.kind, name, self.names()) from None

    def __contains__(self, name: object) -> bool:
        return name in self._members

    def __iter__(self) -> Iterator[str]:
        return iter(self._members)

    def __len__(self) -> int:
        return len(self._members)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}: {', '.join(self._members)})"
