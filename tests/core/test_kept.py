"""A value kept per process: computed once per version, again when the version moves or it is
too old, and once for every thread that finds it stale at the same moment."""

import threading
import time

from core.kept import Kept


def test_the_value_is_kept_while_its_version_stands():
    kept: Kept[str] = Kept()
    computed = []

    def compute(value):
        computed.append(value)
        return value

    assert kept.get(1, lambda: compute("a")) == "a"
    assert kept.get(1, lambda: compute("b")) == "a"
    assert kept.get(2, lambda: compute("c")) == "c"
    assert kept.get(2, lambda: compute("d")) == "c" and computed == ["a", "c"]


def test_a_value_older_than_its_maximum_age_is_computed_again():
    kept: Kept[str] = Kept()
    assert kept.get(1, lambda: "old", max_age=60) == "old"
    assert kept.get(1, lambda: "new", max_age=60) == "old"
    assert kept.get(1, lambda: "new", max_age=0) == "new"


def test_threads_that_find_it_stale_together_compute_it_once():
    kept: Kept[str] = Kept()
    computed = []
    barrier = threading.Barrier(8)

    def slow():
        computed.append(1)
        time.sleep(0.05)
        return "value"

    def reader():
        barrier.wait()
        assert kept.get(1, slow) == "value"

    threads = [threading.Thread(target=reader) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert computed == [1]
