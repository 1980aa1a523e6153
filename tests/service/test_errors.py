import pytest

from service.errors import KIND_HEADERS, error_response, redact


@pytest.mark.parametrize(
    "message,want",
    [
        ("index file /srv/idx/shard-00000/vectors.npy is missing", "index file shard-00000/vectors.npy is missing"),
        ("cannot load model from /opt/venv/lib/site-packages/m: bad", "cannot load model from site-packages/m: bad"),
        ("(see /etc/fill/keys)", "(see fill/keys)"),
        ("top_k: Input should be a valid integer", "top_k: Input should be a valid integer"),
        ("see http://example.org/a/b/c", "see http://example.org/a/b/c"),
        ("ratio 1/2/3 and a/b/c", "ratio 1/2/3 and a/b/c"),
        (
            "changed by another writer (add documents (POST /admin/documents), pid 7)",
            "changed by another writer (add documents (POST /admin/documents), pid 7)",
        ),
        ("DELETE /admin/documents/x of /srv/a/b/c", "DELETE /admin/documents/x of b/c"),
    ],
)
def test_redact_keeps_the_last_two_parts_of_absolute_paths_only(message, want):
    assert redact(message) == want


def test_every_error_of_a_kind_carries_its_headers():
    r = error_response("overloaded", "busy")
    assert r.status_code == 429 and r.headers["retry-after"] == KIND_HEADERS["overloaded"]["Retry-After"]
    assert error_response("unauthorized", "no").headers["www-authenticate"] == "Bearer"
    assert "retry-after" not in error_response("validation", "bad").headers
