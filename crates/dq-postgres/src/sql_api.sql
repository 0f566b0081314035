-- The SQL front door (schema version 2): functions an application calls
-- inside its own transaction, so that a job commits or rolls back with the
-- data it is about. Created in dq's schema with `SET search_path FROM
-- CURRENT` (they see only dq's tables) and SECURITY DEFINER (a role granted
-- EXECUTE needs no right on the tables). docs/postgres.md documents them.
--
-- They take no lock on the topic's row (dq's own calls lock it for their
-- short transactions): a job is one row of `jobs`, and the topic's counts
-- move through `topic_deltas`, insert-only rows that dq folds into `topics`
-- the next time it locks the topic (dq's own acks count there too). A wake-up is a NOTIFY of the
-- application's transaction: it fires at its commit, never on a rollback.

CREATE TABLE topic_deltas (
  tid bigint NOT NULL,
  d_scheduled bigint NOT NULL DEFAULT 0, d_ready bigint NOT NULL DEFAULT 0,
  d_reserved bigint NOT NULL DEFAULT 0, d_dead bigint NOT NULL DEFAULT 0,
  enqueued bigint NOT NULL DEFAULT 0, cancelled bigint NOT NULL DEFAULT 0,
  acked bigint NOT NULL DEFAULT 0,
  keyed boolean NOT NULL DEFAULT false
);
CREATE INDEX topic_deltas_tid ON topic_deltas (tid);

-- Raises dq's error `code` (the message starts with it, as the HTTP API's
-- error code): SQLSTATE 22023 (invalid_parameter_value), or P0002
-- (no_data_found) for a job that is not there, 55000
-- (object_not_in_prerequisite_state) for one in the wrong state.
CREATE FUNCTION fail(code text, message text, state text DEFAULT '22023') RETURNS void
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
  RAISE EXCEPTION USING MESSAGE = code || ': ' || message, ERRCODE = state,
    HINT = 'dq error code ' || code;
END $$;

CREATE FUNCTION now_ms() RETURNS bigint
LANGUAGE sql VOLATILE AS $$ SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint $$;

-- dq-core's Topic::new, JobId::new, JobKey::new.
CREATE FUNCTION check_name(what text, code text, max int, value text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path FROM CURRENT AS $$
BEGIN
  IF value IS NULL OR char_length(value) < 1 OR char_length(value) > max THEN
    PERFORM fail(code, format('%s must be 1-%s characters, got %s', what, max, coalesce(char_length(value), 0)));
  END IF;
  IF value ~ '[[:space:][:cntrl:]]' THEN
    PERFORM fail(code, format('%s may not hold whitespace or control characters', what));
  END IF;
  IF what <> 'key' AND value IN ('.', '..') THEN
    PERFORM fail(code, format('%L is not a job %s: a URL path cannot carry it', value, what));
  END IF;
END $$;

CREATE FUNCTION check_topic(topic text) RETURNS void
LANGUAGE plpgsql IMMUTABLE SET search_path FROM CURRENT AS $$
BEGIN
  IF topic IS NULL OR octet_length(topic) < 1 OR octet_length(topic) > 200 THEN
    PERFORM fail('invalid_topic', format('topic must be 1-200 bytes, got %s', coalesce(octet_length(topic), 0)));
  END IF;
  IF topic !~ '^[A-Za-z0-9._:+/;$()-]+$' THEN
    PERFORM fail('invalid_topic', 'topic may hold only A-Z a-z 0-9 . _ : - + / ; $ ( )');
  END IF;
  IF topic IN ('.', '..') THEN
    PERFORM fail('invalid_topic', format('%L is not a topic name: a URL path cannot carry it', topic));
  END IF;
END $$;

-- How deeply a JSON value nests arrays and objects (a scalar: 0).
CREATE FUNCTION json_depth(j jsonb) RETURNS int
LANGUAGE sql IMMUTABLE AS $$
  WITH RECURSIVE t(v, d) AS (
    SELECT j, 1
    UNION ALL
    SELECT c.v, t.d + 1 FROM t,
      LATERAL (SELECT value FROM jsonb_each(CASE WHEN jsonb_typeof(t.v) = 'object' THEN t.v END)
               UNION ALL
               SELECT value FROM jsonb_array_elements(CASE WHEN jsonb_typeof(t.v) = 'array' THEN t.v END)) c(v)
    WHERE jsonb_typeof(t.v) IN ('object', 'array')
  )
  SELECT coalesce(max(d), 0) FROM t WHERE jsonb_typeof(v) IN ('object', 'array')
$$;

CREATE FUNCTION interval_ms(i interval) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$ SELECT (extract(epoch FROM i) * 1000)::bigint $$;

-- Wakes the topic's waiters at the commit of the calling transaction.
CREATE FUNCTION wake(topic text) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$ SELECT pg_notify('dq_wake.' || current_schema(), topic) $$;

-- dq.enqueue is in sql_enqueue.sql (a later version replaces it).

-- Cancels a job in any state, as DELETE /v1/topics/{topic}/jobs/{id}:
-- its state before, or NULL when there was no such job. Starts the job's
-- dedup window.
CREATE FUNCTION cancel(topic text, id text) RETURNS text
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v_now bigint := now_ms();
  v_tid bigint;
  v_row record;
  v_active bigint;
  v_limit bigint;
BEGIN
  PERFORM check_topic(topic);
  PERFORM check_name('id', 'invalid_id', 256, id);
  SELECT t.tid, t.key_concurrency INTO v_tid, v_limit FROM topics t WHERE t.name = topic;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  DELETE FROM jobs j WHERE j.tid = v_tid AND j.id = cancel.id
    RETURNING j.state, j.dedup_ms, j.fkey INTO v_row;
  IF NOT FOUND THEN
    RETURN NULL;
  END IF;
  IF v_row.dedup_ms > 0 THEN
    INSERT INTO dedup (tid, id, until_ms) VALUES (v_tid, cancel.id, v_now + v_row.dedup_ms)
    ON CONFLICT ON CONSTRAINT dedup_pkey DO UPDATE SET until_ms = excluded.until_ms;
  END IF;
  INSERT INTO topic_deltas (tid, d_scheduled, d_ready, d_reserved, d_dead, cancelled)
  VALUES (v_tid, -(v_row.state = 0)::int, -(v_row.state = 1)::int, -(v_row.state = 2)::int,
          -(v_row.state = 3)::int, 1);
  IF v_row.state = 2 AND v_row.fkey IS NOT NULL THEN
    UPDATE fkeys f SET active = greatest(f.active - 1, 0) WHERE f.tid = v_tid AND f.fkey = v_row.fkey
      RETURNING f.active INTO v_active;
    IF v_active IS NOT NULL AND v_limit IS NOT NULL AND v_active + 1 >= v_limit THEN
      PERFORM wake(topic);
    END IF;
  END IF;
  RETURN (ARRAY['scheduled', 'ready', 'reserved', 'dead'])[v_row.state + 1];
END $$;

-- Moves a waiting (scheduled or ready) job to a new due time (a time in
-- the past: now), as POST /v1/topics/{topic}/jobs/{id}/reschedule. Raises
-- job_not_found, or not_in_state for a reserved or dead job.
CREATE FUNCTION reschedule(topic text, id text, due timestamptz) RETURNS timestamptz
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v_now bigint := now_ms();
  v_tid bigint;
  v_seq bigint;
  v_state smallint;
  v_due bigint;
  v_to smallint;
  v_head bigint;
BEGIN
  PERFORM check_topic(topic);
  PERFORM check_name('id', 'invalid_id', 256, id);
  IF due IS NULL THEN
    PERFORM fail('invalid_due_at', 'due is required');
  END IF;
  v_due := greatest((extract(epoch FROM due) * 1000)::bigint, v_now);
  IF v_due > ((v_now / 86400000) + 1 + 3650) * 86400000 THEN
    PERFORM fail('invalid_due_at', format('due %s is later than 3650 days after the end of this UTC day (max_delay)', due));
  END IF;
  SELECT t.tid INTO v_tid FROM topics t WHERE t.name = topic;
  SELECT j.seq, j.state INTO v_seq, v_state FROM jobs j
    WHERE j.tid = v_tid AND j.id = reschedule.id FOR UPDATE;
  IF v_seq IS NULL THEN
    PERFORM fail('job_not_found', format('no job %L in topic %L', id, topic), 'P0002');
  END IF;
  IF v_state NOT IN (0, 1) THEN
    PERFORM fail('not_in_state', format('job is %s; this call is not allowed in that state',
      (ARRAY['scheduled', 'ready', 'reserved', 'dead'])[v_state + 1]), '55000');
  END IF;
  v_to := CASE WHEN v_due <= v_now THEN 1 ELSE 0 END;
  IF v_to = 0 THEN
    SELECT j.due_ms INTO v_head FROM jobs j WHERE j.tid = v_tid AND j.state = 0 ORDER BY j.due_ms LIMIT 1;
  END IF;
  UPDATE jobs SET state = v_to, due_ms = v_due WHERE seq = v_seq;
  IF v_to <> v_state THEN
    INSERT INTO topic_deltas (tid, d_scheduled, d_ready)
    VALUES (v_tid, CASE WHEN v_to = 0 THEN 1 ELSE -1 END, CASE WHEN v_to = 1 THEN 1 ELSE -1 END);
  END IF;
  IF v_to = 1 OR v_head IS NULL OR v_due < v_head THEN
    PERFORM wake(topic);
  END IF;
  RETURN to_timestamp(v_due / 1000.0);
END $$;

-- No function of the schema is callable by every role: an operator grants
-- EXECUTE on the three front-door ones (docs/postgres.md, the dq_enqueue role).
DO $$ BEGIN
  EXECUTE format('REVOKE EXECUTE ON ALL FUNCTIONS IN SCHEMA %I FROM PUBLIC', current_schema());
END $$;
