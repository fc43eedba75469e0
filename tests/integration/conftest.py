"""Fixtures the worker's integration tests share: the in-process dispatch channel and
handlers that record their calls (``tests.helpers.Recorder``)."""

from __future__ import annotations

import pytest

from flowforge.processes.transport import InMemoryDispatchChannel
from tests.helpers import Recorder


@pytest.fixture
def channel() -> InMemoryDispatchChannel:
    return InMemoryDispatchChannel()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder()
