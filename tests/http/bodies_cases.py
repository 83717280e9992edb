"""What the body tests run, once recording and once replaying in a fresh process.

``python bodies_cases.py MODE CASSETTE URL`` posts OAuth token forms, multipart uploads (a
password field, a PEM private key file) and JSON holding a ``ya29.`` token under an ordinary
name, through httpx (sync and async) and requests, inside ``dejacache.cassette(CASSETTE,
mode=MODE)``, and prints one JSON object: each case's status and the parts of its answer that
are not credentials (the nonce says whether it was the recorded answer). ``SECRETS`` must
appear in no file.
"""

from __future__ import annotations

import asyncio
import sys
import urllib.parse
from typing import Any

import httpx
import orjson
import requests

import dejacache

PEM = ("-----BEGIN OPENSSH PRIVATE KEY-----\n"
       "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
       "QyNTUxOQAAACBPEMCANARYKEYBODYxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxAAAAJgJ\n"
       "-----END OPENSSH PRIVATE KEY-----\n")
SECRETS = {
    "client_secret": "cs-CANARY-0001",
    "refresh_token": "rt-CANARY-0002",
    "code": "code-CANARY-0003",
    "code_verifier": "verifier-CANARY-0004-abcdefghijklmnopqrstuvwxyz",
    "password": "pw-CANARY-0005",
    "pem": "PEMCANARYKEYBODY",
    "ya29": "ya29.a0AfB_CANARY0006" + "q" * 40,
    "async_secret": "cs-CANARY-0007",
}


def _token(r: Any) -> dict[str, Any]:
    body = r.json()
    return {"status": r.status_code, "nonce": body["nonce"], "grant": body["grant_type"],
            "type": body["token_type"]}


def _form_answer(r: Any) -> dict[str, Any]:
    pairs = dict(urllib.parse.parse_qsl(r.text))
    pairs.pop("access_token")
    return {"status": r.status_code, "content-type": r.headers["content-type"], **pairs}


def _upload(r: Any) -> dict[str, Any]:
    return {"status": r.status_code, **r.json()}


def _echo(r: Any) -> dict[str, Any]:
    body = r.json()
    return {"status": r.status_code, "nonce": body["nonce"], "model": body["echo"]["model"]}


def sync_cases(url: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    client_credentials = {"grant_type": "client_credentials", "client_id": "app-1",
                          "client_secret": SECRETS["client_secret"], "scope": "read write"}
    with httpx.Client(base_url=url) as client:
        out["httpx_client_credentials"] = _token(client.post("/token", data=client_credentials))
        out["httpx_authorization_code"] = _token(client.post("/token", data={
            "grant_type": "authorization_code", "code": SECRETS["code"],
            "code_verifier": SECRETS["code_verifier"], "client_id": "app-1",
            "redirect_uri": "http://127.0.0.1/callback"}))
        out["httpx_upload"] = _upload(client.post(
            "/upload", data={"user": "ann", "password": SECRETS["password"]},
            files={"key_file": ("id_ed25519", PEM, "application/x-pem-file"),
                   "blob": ("blob.bin", bytes(range(256)) * 40, "application/octet-stream")}))
        out["httpx_json"] = _echo(client.post("/echo", json={
            "model": "m", "note": f"use {SECRETS['ya29']} for the call"}))
    out["requests_refresh"] = _token(requests.post(url + "/token", data={
        "grant_type": "refresh_token", "refresh_token": SECRETS["refresh_token"],
        "client_id": "app-1", "client_secret": SECRETS["client_secret"]}, timeout=10))
    out["requests_github"] = _form_answer(requests.post(
        url + "/login/oauth/access_token", data={"client_id": "app-1",
                                                 "client_secret": SECRETS["client_secret"],
                                                 "code": SECRETS["code"]}, timeout=10))
    out["requests_upload"] = _upload(requests.post(
        url + "/upload", data={"user": "ann", "password": SECRETS["password"]},
        files={"key_file": ("id_ed25519", PEM, "application/x-pem-file")}, timeout=10))
    out["requests_json"] = _echo(requests.post(
        url + "/echo", json={"model": "m", "context": {"credential_hint": SECRETS["ya29"]}},
        timeout=10))
    return out


async def async_cases(url: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=url) as client:
        r = await client.post("/token", data={"grant_type": "client_credentials",
                                              "client_secret": SECRETS["async_secret"]})
        return {"httpx_async_form": _token(r)}


def main() -> None:
    mode, cassette, url = sys.argv[1:4]
    with dejacache.cassette(cassette, mode=mode):
        out = sync_cases(url)
        out.update(asyncio.run(async_cases(url)))
    sys.stdout.write(orjson.dumps(out).decode())


if __name__ == "__main__":
    main()
