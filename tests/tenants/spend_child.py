"""A process that records spend rows without end and says what it has announced and what has committed,
for the kill -9 test (tests/tenants/test_spend_log.py):

    recording <n>    rows up to sequence n-1 are about to be recorded (an upper bound on what was recorded)
    committed <n>    every row with sequence < n is in the database (batches go in FIFO order)
"""

from __future__ import annotations

import asyncio
import sys

from sits.tenants.config import SpendLogConfig
from sits.tenants.records import SpendRecord, Usage
from sits.tenants.spend_log import SpendLog
from sits.tenants.spend_store import SpendStore
from sits.tenants.store import TenantStore, open_database

AT = 1_800_000_000.0
CHUNK = 20


def spend(seq: int) -> SpendRecord:
    return SpendRecord(request_id=f"req-{seq:08d}", at=AT + seq * 0.001, key_id="key_a", team_id="team_a",
                       user=None, model="m1", endpoint="e1", usage=Usage(10, 2, 5, 1), cost_usd=0.001,
                       latency_ms=12.0, status=200)


class ReportingStore(SpendStore):
    async def write(self, rows):  # type: ignore[no-untyped-def]
        fresh = await super().write(rows)
        print(f"committed {int(rows[-1][0].removeprefix('req-')) + 1}", flush=True)
        return fresh


async def main(url: str) -> None:
    store = TenantStore(open_database(url))
    await store.start()
    log = SpendLog(ReportingStore(store.db), SpendLogConfig(flush_interval_s=0.05, batch_rows=50, queue_rows=100_000))
    await log.start()
    seq = 0
    while True:  # until killed (the parent bounds the wait)
        print(f"recording {seq + CHUNK}", flush=True)
        for _ in range(CHUNK):
            log.record(spend(seq))
            seq += 1
        await asyncio.sleep(0.005)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
