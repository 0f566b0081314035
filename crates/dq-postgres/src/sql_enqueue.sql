-- Enqueues one job, as POST /v1/topics/{topic}/jobs with an id: the same
-- checks (codes and limits of a dq with the default limits: bodies up to
-- 1 MiB, delays up to 3650 days), idempotent by id (an id already there is
-- answered, not replaced; an id in its dedup window writes nothing). Give
-- `delay` or `due`, not both; neither: the topic's default delay. The
-- body is stored as PostgreSQL's text of the jsonb value.
-- The job's W3C trace context is the transaction's settings
-- `dq.traceparent` and `dq.tracestate` (`SET LOCAL dq.traceparent = …`
-- before the call), as the HTTP API's headers: a traceparent (version 00,
-- or a later one read as version 00) is kept with the job (and a tracestate of at most 512 printable
-- characters with it); a malformed one is dropped with a NOTICE, never an
-- error. (Schema version 6; version 2 created it without.)
CREATE OR REPLACE FUNCTION enqueue(topic text, id text, body jsonb, delay interval DEFAULT NULL,
    due timestamptz DEFAULT NULL, priority bigint DEFAULT 1024, key text DEFAULT NULL,
    dedup interval DEFAULT NULL)
RETURNS TABLE (job_id text, created boolean, deduplicated boolean, due_at timestamptz, state text)
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  v_now bigint := now_ms();
  v_text text;
  v_ms bigint;
  v_due bigint;
  v_tid bigint;
  v_row record;
  v_cfg record;
  v_dedup bigint;
  v_state smallint;
  v_head bigint;
  v_tp text := nullif(current_setting('dq.traceparent', true), '');
  v_ts text := nullif(current_setting('dq.tracestate', true), '');
  v_trace text;
BEGIN
  PERFORM check_topic(topic);
  PERFORM check_name('id', 'invalid_id', 256, id);
  IF body IS NULL THEN
    PERFORM fail('invalid_body', 'body is required (JSON null is ''null''::jsonb)');
  END IF;
  v_text := body::text;
  IF octet_length(v_text) > 1048576 THEN
    PERFORM fail('body_too_large', format('body is %s bytes; the limit is 1048576 bytes', octet_length(v_text)));
  END IF;
  IF json_depth(body) > 128 THEN
    PERFORM fail('invalid_body', 'body nests arrays/objects deeper than 128 levels');
  END IF;
  IF delay IS NOT NULL AND due IS NOT NULL THEN
    PERFORM fail('invalid_delay', 'give delay or due, not both');
  END IF;
  IF delay IS NOT NULL THEN
    v_ms := interval_ms(delay);
    IF v_ms < 0 THEN
      PERFORM fail('invalid_delay', format('delay must be >= 0, got %s', delay));
    END IF;
    IF v_ms > 3650::bigint * 86400000 THEN
      PERFORM fail('invalid_delay', format('a delay of %s is over the limit of 3650 days (max_delay)', delay));
    END IF;
  END IF;
  IF due IS NOT NULL AND (extract(epoch FROM due) * 1000)::bigint
      > ((v_now / 86400000) + 1 + 3650) * 86400000 THEN
    PERFORM fail('invalid_due_at', format('due %s is later than 3650 days after the end of this UTC day (max_delay)', due));
  END IF;
  IF priority IS NULL OR priority < 0 OR priority > 4294967295 THEN
    PERFORM fail('invalid_priority', format('priority must be 0-4294967295, got %s', priority));
  END IF;
  IF key IS NOT NULL THEN
    PERFORM check_name('key', 'invalid_key', 128, key);
  END IF;
  IF dedup IS NOT NULL AND (interval_ms(dedup) < 0 OR interval_ms(dedup) > 30::bigint * 86400000) THEN
    PERFORM fail('invalid_dedup', format('dedup must be 0-30 days, got %s', dedup));
  END IF;

  IF v_tp IS NOT NULL THEN
    -- Version 00 is 55 characters; a later one (not ff) is read by its
    -- first four fields and kept as version 00, as the HTTP API does.
    IF v_tp ~ '^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}(-.*)?$'
        AND left(v_tp, 2) <> 'ff' AND (left(v_tp, 2) <> '00' OR length(v_tp) = 55)
        AND substr(v_tp, 4, 32) <> repeat('0', 32) AND substr(v_tp, 37, 16) <> repeat('0', 16) THEN
      v_trace := '00-' || substr(v_tp, 4, 52);
      IF v_ts IS NOT NULL THEN
        IF octet_length(v_ts) <= 512 AND v_ts ~ '^[ -~]*$' THEN
          v_trace := v_tp || ' ' || v_ts;
        ELSE
          RAISE NOTICE 'dq: tracestate dropped: over 512 bytes or not printable ASCII';
        END IF;
      END IF;
    ELSE
      RAISE NOTICE 'dq: trace context dropped: % is not a version 00 traceparent', v_tp;
    END IF;
  END IF;

  -- The topic: created if new (no lock on an existing row).
  INSERT INTO topics (name) VALUES (topic) ON CONFLICT (name) DO NOTHING;
  SELECT t.tid, t.default_delay_ms, t.dedup_ms INTO v_cfg FROM topics t WHERE t.name = topic;
  v_tid := v_cfg.tid;

  SELECT j.state, j.due_ms INTO v_row FROM jobs j WHERE j.tid = v_tid AND j.id = enqueue.id;
  IF FOUND THEN
    RETURN QUERY SELECT enqueue.id, false, false, to_timestamp(v_row.due_ms / 1000.0),
      (ARRAY['scheduled', 'ready', 'reserved', 'dead'])[v_row.state + 1];
    RETURN;
  END IF;
  IF EXISTS (SELECT 1 FROM dedup d WHERE d.tid = v_tid AND d.id = enqueue.id AND d.until_ms > v_now) THEN
    RETURN QUERY SELECT enqueue.id, false, true, NULL::timestamptz, NULL::text;
    RETURN;
  END IF;

  IF delay IS NOT NULL THEN
    v_due := v_now + v_ms;
  ELSIF due IS NOT NULL THEN
    v_due := greatest((extract(epoch FROM due) * 1000)::bigint, v_now);
  ELSE
    v_due := v_now + coalesce(v_cfg.default_delay_ms, 0);
  END IF;
  v_dedup := coalesce(interval_ms(dedup), v_cfg.dedup_ms);
  IF v_dedup <= 0 THEN
    v_dedup := NULL;
  END IF;
  v_state := CASE WHEN v_due <= v_now THEN 1 ELSE 0 END;
  IF v_state = 0 THEN
    SELECT j.due_ms INTO v_head FROM jobs j WHERE j.tid = v_tid AND j.state = 0 ORDER BY j.due_ms LIMIT 1;
  END IF;

  -- Another transaction inserting the same id first: this one waits for
  -- it, then answers its job.
  INSERT INTO jobs (tid, id, state, due_ms, priority, created_ms, is_json, body, dedup_ms, fkey, trace)
  VALUES (v_tid, enqueue.id, v_state, v_due, enqueue.priority, v_now, true,
          convert_to(v_text, 'UTF8'), v_dedup, key, v_trace)
  ON CONFLICT ON CONSTRAINT jobs_tid_id_key DO NOTHING;
  IF NOT FOUND THEN
    SELECT j.state, j.due_ms INTO v_row FROM jobs j WHERE j.tid = v_tid AND j.id = enqueue.id;
    RETURN QUERY SELECT enqueue.id, false, false, to_timestamp(v_row.due_ms / 1000.0),
      (ARRAY['scheduled', 'ready', 'reserved', 'dead'])[v_row.state + 1];
    RETURN;
  END IF;
  INSERT INTO topic_deltas (tid, d_scheduled, d_ready, enqueued, keyed)
  VALUES (v_tid, 1 - v_state, v_state, 1, key IS NOT NULL);
  IF v_state = 1 OR v_head IS NULL OR v_due < v_head THEN
    PERFORM wake(topic);
  END IF;
  RETURN QUERY SELECT enqueue.id, true, false, to_timestamp(v_due / 1000.0),
    CASE WHEN v_state = 1 THEN 'ready' ELSE 'scheduled' END;
END $$;

-- Only roles granted it may call it (a new function is PUBLIC's to call;
-- a replaced one keeps its rights, so this changes nothing there).
REVOKE EXECUTE ON FUNCTION enqueue(text, text, jsonb, interval, timestamptz, bigint, text, interval) FROM PUBLIC;
