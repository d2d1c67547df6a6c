"""`trajkit card` and `trajkit push`."""

from __future__ import annotations
