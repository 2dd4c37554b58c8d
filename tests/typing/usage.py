"""Code as typed pipelines write it, checked by `mypy --strict` in scripts/test.sh (never run):
each line here once failed to type-check although it ran."""

from __future__ import annotations

from sensorium import AsyncClient, Client
from sensorium.types import FileRecord


def file_ids_take_any_sequence(client: Client, records: list[FileRecord]) -> None:
    ids: list[str] = [record.file_id for record in records]
    client.query("Reasoner::c2_4_7b_251215a172f6d7", "Summarise.", file_ids=ids)
    client.query("Reasoner::c2_4_7b_251215a172f6d7", "Summarise.", file_ids=records)
    client.query("Reasoner::c2_4_7b_251215a172f6d7", "Summarise.", file_ids=("notes.txt",))


async def and_on_the_async_client(client: AsyncClient, ids: list[str]) -> None:
    await client.query("Reasoner::c2_4_7b_251215a172f6d7", "Summarise.", file_ids=ids)
