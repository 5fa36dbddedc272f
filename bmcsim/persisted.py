"""What the store keeps of a simulated device (a node, a switch): its PERSISTED fields."""

from typing import Generic, Protocol, TypeVar


class DeviceSpec(Protocol):
    @property
    def name(self) -> str: ...


SpecT = TypeVar("SpecT", bound=DeviceSpec)


class PersistedState(Generic[SpecT]):
    """A device named by its spec, whose PERSISTED fields bmcsim's store dumps and restores."""

    __slots__ = ()
    PERSISTED: tuple[str, ...] = ()
    spec: SpecT

    @property
    def name(self) -> str:
        return self.spec.name

    def dump(self) -> dict:
        return {field: getattr(self, field) for field in self.PERSISTED}

    def restore(self, data: dict) -> None:
        for field in self.PERSISTED:
            if field in data:
                setattr(self, field, data[field])
