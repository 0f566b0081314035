"""Schemathesis hooks for scripts/schemathesis.sh.

A job's expiry must be later than its due time (docs/api.md, "Expiry"):
a rule between two fields (`expires_in_ms` / `expires_at_ms` against
`delay_ms` / `due_at_ms` and the server's clock) that JSON Schema cannot
state, so a schema-valid enqueue may rightly get 400 `invalid_expiry`.
Only that refusal is let through; every other failure still fails the run.
"""

import json

import schemathesis

# The message of NewJob::check_expiry's refusal of an expiry not later
# than the due time (crates/dq-core/src/check.rs).
NOT_LATER = "is not later than the job's due time"


@schemathesis.hook
def filter_failure(context, failure, case, response):
    if failure.code != "ST202" or response.status_code != 400:
        return True
    try:
        error = json.loads(response.content)["error"]
    except (ValueError, KeyError, TypeError):
        return True
    return not (error.get("code") == "invalid_expiry" and NOT_LATER in error.get("message", ""))
