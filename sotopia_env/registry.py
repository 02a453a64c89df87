"""One registry style for every extension point: ``Registry``, a name -> item table with an entry-point group.

Every extension point (verifiable kinds, games' rule sets, evaluators, trainers, RL tasks) is one ``Registry``::

    TASKS = Registry("RL task", group="sotopia_env.rl_tasks", error=TaskError)

    @TASKS.register("socialiqa")             # a decorator ...
    def socialiqa(data, max_items): ...

    TASKS.register("mine", build_mine)       # ... or a call; ``TASKS.register(item)`` when the item has a name
    TASKS.lookup("socialiqa")                # the item; an unknown name is one line naming the known ones

- A name taken by another item is refused with a one-line error (the registry's ``error`` class) unless
  ``replace=True``; registering the same item again is no conflict (``same`` decides what counts as the same:
  identity by default, the class for registries of one-instance-per-class items such as kinds).
- An installed package extends it through the registry's entry-point ``group`` (``[project.entry-points.
  "sotopia_env.rl_tasks"] mine = "my_package.tasks:build_mine"``). The group is loaded on the first lookup
  (``lookup``, ``in``, iteration, ``names``), never on import, so a plugin module that imports the registry to
  register itself finds it ready. An entry point that fails to load is a one-line error on every lookup.
- ``check(item, where)`` (optional) validates an item, or turns it into the one held (a class into its instance),
  raising the registry's ``error``; ``name_of`` (optional) reads the name of an item that carries its own.

The registry is a read-only ``Mapping`` of the names to the items (``reg["x"]`` raises ``KeyError``; ``lookup``
raises the one-line error). ``load_entry_point_group`` is the one loop over an entry-point group.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator, Mapping
from importlib.metadata import entry_points
from typing import Any, Generic, TypeVar, overload

from sotopia_env.errors import UserError

T = TypeVar("T")
NAME = re.compile(r"^[a-z][a-z0-9_-]*$")  # a registered name: lower case letters, digits, '-' or '_'


class RegistryError(UserError, ValueError):
    """An item that cannot be registered or found; the message (one line) names it."""


def load_entry_point_group(
    group: str, add: Callable[[Any, str, str], Any], error: type[Exception] = RegistryError
) -> None:
    """Load every entry point of ``group`` and hand each to ``add(found, where, name)`` (``where`` names it in
    errors); one that fails to load is an ``error`` naming it."""
    for point in entry_points(group=group):
        where = f"entry point {point.name!r} ({point.value}, group {group})"
        try:
            found = point.load()
        except Exception as exc:
            raise error(f"{where} failed to load: {type(exc).__name__}: {exc}") from None
        add(found, where, point.name)


def _identical(known: Any, new: Any) -> bool:
    return known is new


def same_class(known: Any, new: Any) -> bool:
    """``same`` for registries of one instance per class (kinds, games' rule sets)."""
    return type(known) is type(new)


class Registry(Mapping[str, T], Generic[T]):
    """A name -> item table of one extension point, with its entry-point ``group``; see the module docstring."""

    def __init__(
        self,
        what: str,
        group: str | None = None,
        *,
        error: type[Exception] = RegistryError,
        check: Callable[[Any, str], T] | None = None,
        name_of: Callable[[T], str] | None = None,
        same: Callable[[T, T], bool] = _identical,
        normalize: Callable[[str], str] | None = None,
        pattern: re.Pattern[str] | None = NAME,
    ) -> None:
        self.what = what  # in errors: "unknown RL task 'x'"
        self.group = group
        self.error = error
        self._check = check
        self._name_of = name_of
        self._same = same
        self._normalize = normalize
        self._pattern = pattern
        self._items: dict[str, T] = {}
        self._loaded = group is None

    # -- registering --------------------------------------------------------------------------------------------

    @overload
    def register(self, name: str, item: None = None, *, replace: bool = False) -> Callable[[T], T]: ...
    @overload
    def register(self, name: str, item: T, *, replace: bool = False) -> T: ...
    @overload
    def register(self, name: T, item: None = None, *, replace: bool = False) -> T: ...

    def register(self, name: Any, item: Any = None, *, replace: bool = False) -> Any:
        """``register(name, item)`` or ``register(item)`` (an item that carries its name) register and return
        the item; ``register(name)`` is a decorator that does so. A name taken by another item is the registry's
        ``error`` unless ``replace``."""
        if isinstance(name, str) and item is None:
            return lambda found: self.add(found, f"register({name!r})", name, replace)
        if not isinstance(name, str):
            name, item = None, name
        return self.add(item, f"register({name or getattr(item, 'name', type(item).__name__)!r})", name, replace)

    def add(self, item: Any, where: str, name: str | None = None, replace: bool = False) -> T:
        """Register ``item`` under ``name`` (a registry with ``name_of``: the item's own name), ``where`` naming its
        source in errors; returns the held item (the same one already there stays)."""
        if self._check is not None:
            item = self._check(item, where)
        if self._name_of is not None:
            name = self._name_of(item)
        if not isinstance(name, str):
            raise self.error(f"{where}: {self.what} {item!r} has no name")
        key = self._normalize(name) if self._normalize else name
        if self._pattern is not None and not self._pattern.match(key):
            raise self.error(f"{where}: {self.what} name {name!r} must be lower case letters, digits, '-' or '_'")
        known = self._items.get(key)
        if known is not None and not replace and not self._same(known, item):
            raise self.error(
                f"{where}: the {self.what} name {key!r} is taken by {_describe(known)} (pass replace=True)"
            )
        if known is None or replace:
            self._items[key] = item
        return self._items[key]

    def unregister(self, name: str) -> None:
        """Forget ``name`` (a test's toy item, say); a built-in one comes back on the next process."""
        self._items.pop(self._normalize(name) if self._normalize else name, None)

    # -- finding ------------------------------------------------------------------------------------------------

    def load_entry_points(self) -> None:
        """Load the entry-point group, once (every lookup does it first); a failure is raised on every lookup."""
        if self._loaded:
            return
        self._loaded = True  # first: a plugin module that registers itself on import finds the registry ready
        try:
            load_entry_point_group(self.group or "", self._add_entry_point, self.error)
        except Exception:
            self._loaded = False  # every later lookup says so again, rather than go on without it
            raise

    def _add_entry_point(self, found: Any, where: str, name: str) -> Any:
        return self.add(found, where, name)

    def lookup(self, name: str) -> T:
        """The item registered as ``name``; an unknown one is the registry's ``error`` naming the known ones."""
        self.load_entry_points()
        key = self._normalize(name) if self._normalize else name
        if key not in self._items:
            raise self.error(f"unknown {self.what} {name!r} (known: {', '.join(sorted(self._items)) or 'none'})")
        return self._items[key]

    def held(self) -> list[T]:
        """The items registered so far, without loading the entry points (for a ``check`` that compares them)."""
        return list(self._items.values())

    def names(self) -> list[str]:
        """The registered names, sorted (the entry points' included)."""
        self.load_entry_points()
        return sorted(self._items)

    def __getitem__(self, name: str) -> T:
        self.load_entry_points()
        return self._items[self._normalize(name) if self._normalize else name]

    def __contains__(self, name: object) -> bool:
        self.load_entry_points()
        if isinstance(name, str) and self._normalize:
            name = self._normalize(name)
        return name in self._items

    def __iter__(self) -> Iterator[str]:
        self.load_entry_points()
        return iter(sorted(self._items))

    def __len__(self) -> int:
        self.load_entry_points()
        return len(self._items)

    def __repr__(self) -> str:
        return f"Registry({self.what!r}, group={self.group!r}, names={sorted(self._items)})"

    @contextlib.contextmanager
    def scoped(self, fresh: bool = False, reload: bool = False) -> Iterator[Registry[T]]:
        """Within the block, registrations (and the entry points' loading) are undone afterwards: for tests.
        ``fresh``: the block starts empty; ``fresh`` or ``reload``: its entry points load (again) on first lookup."""
        items, loaded = dict(self._items), self._loaded
        if fresh:
            self._items = {}
        if fresh or reload:
            self._loaded = self.group is None
        try:
            yield self
        finally:
            self._items, self._loaded = items, loaded


def _describe(item: Any) -> str:
    kind = item if isinstance(item, type) or callable(item) and hasattr(item, "__qualname__") else type(item)
    return f"{getattr(kind, '__module__', '?')}.{getattr(kind, '__qualname__', kind)}"
