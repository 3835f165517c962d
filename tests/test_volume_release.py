"""A volume that another launcher's tools container holds for a moment (a `gc` reading each copy) is
removed once it is released, within a bound; any other failure is raised at once."""

from __future__ import annotations

import time

import pytest

from launcher.engine.tools import remove_released
from launcher.errors import EngineError, NotFound


class Held:
    """remove_volume answers as the engine does while a container holds the volume, `times` times."""

    def __init__(self, times: int, error: str = "remove v: volume is in use - [59673214342b]"):
        self.times, self.error, self.calls = times, error, 0

    def remove_volume(self, name: str) -> None:
        self.calls += 1
        if self.calls <= self.times:
            raise EngineError(f"removing volume {name}: {self.error}")


@pytest.mark.parametrize("error", ["remove v: volume is in use - [59673214342b]",          # Docker
                                   "volume v is being used by the following container(s): 5967: volume is being used"])
def test_a_volume_held_for_a_moment_is_removed_once_released(error):
    engine = Held(3, error)
    remove_released(engine, "v", seconds=10)
    assert engine.calls == 4


def test_a_volume_held_past_the_bound_is_refused_with_the_engine_s_words():
    engine = Held(10 ** 6)
    began = time.monotonic()
    with pytest.raises(EngineError, match="volume is in use"):
        remove_released(engine, "v", seconds=0.6)
    assert 0.6 <= time.monotonic() - began < 5 and engine.calls >= 2


def test_another_failure_is_raised_at_once_and_a_volume_already_gone_is_fine():
    engine = Held(1, "permission denied")
    with pytest.raises(EngineError, match="permission denied"):
        remove_released(engine, "v", seconds=10)
    assert engine.calls == 1

    class Gone:
        def remove_volume(self, name):
            raise NotFound(f"removing volume {name}: no such volume")

    remove_released(Gone(), "v")
