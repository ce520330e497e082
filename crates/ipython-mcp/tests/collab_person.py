"""A person editing a notebook in JupyterLab, played by a script: joins the live document of
a notebook on a Jupyter server with jupyter-collaboration (pycrdt + jupyter_ydoc's YNotebook,
the same document model JupyterLab's frontend mirrors) and takes commands.

    python collab_person.py <server url> <path>      (the token in $JUPYTER_TOKEN)

One JSON command per line on stdin, one JSON answer per line on stdout
({"ok": true, ...} or {"ok": false, "error": "..."}):

    {"cmd": "read"}                                     -> {"notebook": <nbformat JSON>}
    {"cmd": "wait_for", "expr": "<Python expression>", "timeout": 60}
        waits until the expression is true of `nb` (the notebook JSON), `cells` (id -> cell)
        and `awareness` (the other clients' awareness states); answers with the notebook, or
        ok false with "timeout" and the notebook at the deadline
    {"cmd": "insert_cell", "index": 0, "cell": {...}}   (a cell as nbformat JSON, with an id)
    {"cmd": "set_source", "id": "...", "source": "..."} (a granular text change, as typing)
    {"cmd": "delete_cell", "id": "..."}
    {"cmd": "close"}

Each edit answers once the server has it (a sync step 1 after the update, whose answer the
room sends after applying the update). Test helper: the expressions are the test's own code.
"""

import asyncio
import json
import os
import sys
import time
import urllib.parse

from jupyter_ydoc import YNotebook
from pycrdt import (
    Awareness,
    Doc,
    YMessageType,
    YSyncMessageType,
    create_awareness_message,
    create_sync_message,
    create_update_message,
    handle_sync_message,
    read_message,
)
from tornado.httpclient import AsyncHTTPClient, HTTPRequest
from tornado.websocket import websocket_connect


class Person:
    def __init__(self, url: str, path: str, token: str) -> None:
        self.url = url if url.endswith("/") else url + "/"
        self.path = path
        self.headers = {"Authorization": f"token {token}"}
        self.doc = Doc()
        self.notebook = YNotebook(self.doc)
        self.awareness = Awareness(self.doc)
        self.socket = None
        self.applying_remote = False
        self.step2 = asyncio.Queue()
        self.changed = asyncio.Event()
        self.closed = None

    async def join(self) -> None:
        session = await AsyncHTTPClient().fetch(
            HTTPRequest(
                self.url + "api/collaboration/session/" + urllib.parse.quote(self.path),
                method="PUT",
                headers=self.headers,
                body=json.dumps({"format": "json", "type": "notebook"}),
            )
        )
        session = json.loads(session.body)
        ws_url = self.url.replace("http", "ws", 1) + (
            f"api/collaboration/room/json:notebook:{session['fileId']}"
            f"?sessionId={session['sessionId']}"
        )
        self.socket = await websocket_connect(HTTPRequest(ws_url, headers=self.headers))
        self.doc.observe(self._local_change)
        asyncio.get_running_loop().create_task(self._read())
        self.awareness.set_local_state({"user": {"name": "person", "username": "person"}})
        await self._send(
            create_awareness_message(
                self.awareness.encode_awareness_update([self.awareness.client_id])
            )
        )
        await self.sync()

    def _local_change(self, event) -> None:
        if not self.applying_remote:
            self.socket.write_message(create_update_message(event.update), binary=True)
        self.changed.set()

    async def _send(self, message: bytes) -> None:
        await self.socket.write_message(message, binary=True)

    async def _read(self) -> None:
        while True:
            message = await self.socket.read_message()
            if message is None:
                self.closed = f"closed ({self.socket.close_code})"
                self.changed.set()
                await self.step2.put(None)
                return
            if isinstance(message, str) or not message:
                continue
            if message[0] == YMessageType.SYNC:
                self.applying_remote = True
                try:
                    reply = handle_sync_message(message[1:], self.doc)
                finally:
                    self.applying_remote = False
                if reply is not None:
                    await self._send(reply)
                if message[1] == YSyncMessageType.SYNC_STEP2:
                    await self.step2.put(True)
            elif message[0] == YMessageType.AWARENESS:
                self.awareness.apply_awareness_update(read_message(message[1:]), "remote")
            self.changed.set()

    async def sync(self) -> None:
        """Waits until the server has everything sent so far."""
        await self._send(create_sync_message(self.doc))
        if await self.step2.get() is None:
            raise RuntimeError(f"the room is {self.closed}")

    def read(self) -> dict:
        return self.notebook.get()

    def _index(self, cell_id: str) -> int:
        for index, cell in enumerate(self.notebook.ycells):
            if cell.get("id") == cell_id:
                return index
        raise KeyError(f"no cell {cell_id}")

    async def handle(self, command: dict) -> dict:
        name = command.get("cmd")
        if name == "read":
            return {"notebook": self.read()}
        if name == "wait_for":
            deadline = time.monotonic() + float(command.get("timeout", 60))
            while True:
                nb = self.read()
                scope = {
                    "nb": nb,
                    "cells": {cell.get("id"): cell for cell in nb["cells"]},
                    "awareness": [
                        state
                        for client, state in self.awareness.states.items()
                        if client != self.awareness.client_id
                    ],
                }
                if eval(command["expr"], {}, scope):  # noqa: S307 - the test's own expression
                    return {"notebook": nb}
                if self.closed:
                    return {"ok": False, "error": f"room {self.closed}", "notebook": nb}
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return {"ok": False, "error": "timeout", "notebook": nb}
                self.changed.clear()
                try:
                    await asyncio.wait_for(self.changed.wait(), timeout=min(remaining, 1.0))
                except asyncio.TimeoutError:
                    pass
        if name == "insert_cell":
            with self.doc.transaction():
                self.notebook.ycells.insert(
                    int(command["index"]), self.notebook.create_ycell(command["cell"])
                )
            await self.sync()
            return {}
        if name == "set_source":
            self.notebook.set_cell(self._index(command["id"]), source=command["source"])
            await self.sync()
            return {}
        if name == "delete_cell":
            del self.notebook.ycells[self._index(command["id"])]
            await self.sync()
            return {}
        raise ValueError(f"unknown command {name!r}")


async def main() -> None:
    url, path = sys.argv[1], sys.argv[2]
    person = Person(url, path, os.environ.get("JUPYTER_TOKEN", ""))
    loop = asyncio.get_running_loop()

    def answer(reply: dict) -> None:
        reply.setdefault("ok", True)
        sys.stdout.write(json.dumps(reply) + "\n")
        sys.stdout.flush()

    try:
        await person.join()
    except Exception as error:  # noqa: BLE001 - reported to the test
        answer({"ok": False, "error": f"join failed: {error!r}"})
        return
    answer({"joined": True})
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        try:
            command = json.loads(line)
            if command.get("cmd") == "close":
                answer({})
                break
            answer(await person.handle(command))
        except Exception as error:  # noqa: BLE001 - reported to the test
            answer({"ok": False, "error": repr(error)})
    if person.socket is not None:
        person.socket.close()


if __name__ == "__main__":
    asyncio.run(main())
