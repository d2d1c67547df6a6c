"""The push/card scan catches Bearer headers, URL credentials and split tokens; cards show clean endpoints."""

from __future__ import annotations

from trajkit.data_cards.provenance import _compact
from trajkit.data_cards.secret_scan import clean_endpoint, scan_text

ZW = "\u200b"


def test_each_form_is_found_and_plain_words_are_not():
    cases = {
        "Authorization: Bearer abcDEF123456ghiJKL": "Bearer header",
        "fetched https://admin:s3cr3t-pass@db.internal:5432/x": "credentials in a URL",
        f"token is hf_abcd{ZW}efghijklmnopqrstuvwxyz0123456789": "token split by an invisible character",
    }
    for text, kind in cases.items():
        found = scan_text(text, "README.md", {})
        assert [f.kind for f in found] == [kind], text
        assert "s3cr3t" not in str(found[0]) and "abcDEF123456" not in str(found[0])
    for text in ("enabled: false", "timezone UTC", "see https://example.com/a?b=c", "bearer of bad news"):
        assert scan_text(text, "README.md", {}) == [], text


def test_card_endpoints_lose_credentials_and_query():
    assert clean_endpoint("https://user:pw@api.example.com:8443/v1?key=abc#x") == "https://api.example.com:8443/v1"
    cfg = {"model": {"model": "m", "backend": "openai", "base_url": "http://u:p@h:1/v1?token=t", "timeout_s": 5}}
    assert _compact(cfg) == {"model": {"model": "m", "backend": "openai", "base_url": "http://h:1/v1"}}
    listed = {"model": "m", "backend": "openai", "base_url": ["http://a/v1?k=1", "http://b/v1"]}
    assert _compact(listed)["base_url"] == "http://a/v1, http://b/v1"


def test_shards_are_scanned_for_the_new_forms_inside_nested_strings(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from trajkit.data_cards.secret_scan import scan_parquet

    rows = [["ok", "Bearer abcDEF123456ghiJKL"], ["x"], [f"hf_abcd{ZW}efghijklmnopqrstuvwxyz0123"], ["https://a:b@h/"]]
    pq.write_table(pa.table({"m": rows + [["false UTC"]]}), tmp_path / "s.parquet")
    found = scan_parquet(tmp_path / "s.parquet", "s", {})
    assert [(f.row, f.kind) for f in found] == [
        (0, "Bearer header"),
        (2, "token split by an invisible character"),
        (3, "credentials in a URL"),
    ]
