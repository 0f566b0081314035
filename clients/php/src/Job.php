<?php

declare(strict_types=1);

namespace Dq;

/**
 * A job as reserve, GET job and the dead-letter list give it.
 *
 * - `body`: the JSON body decoded with objects kept as objects (`stdClass`,
 *   so `{}` stays an object and `[]` a list), integers beyond PHP_INT_MAX as
 *   strings of their digits; null for a job of bytes.
 * - `rawBody`: the body's JSON text exactly as it was sent (key order,
 *   spacing, number spelling); null for a job of bytes.
 * - `bytes`: the body of a job enqueued with `Dq\Bytes` (`body_base64`).
 * - `json()`: the body with objects as associative arrays.
 * - `data`: every field of the reply as an array (snake_case wire names).
 */
final class Job
{
    public readonly string $topic;
    public readonly string $id;
    /** The lease's token (reserve only). */
    public readonly ?string $token;
    /** Which hand-out this is, 1 for the first (reserve only). */
    public readonly ?int $attempt;
    public readonly ?int $dueAtMs;
    public readonly ?int $leaseDeadlineMs;
    public readonly ?int $priority;
    /** scheduled, ready, reserved or dead (GET job, dead letters). */
    public readonly ?string $state;
    /** Hand-outs so far (GET job, dead letters). */
    public readonly ?int $attempts;
    public readonly ?string $lastError;
    /**
     * Its last failed attempts (at most ten), oldest first, each
     * `['attempt' => int, 'at_ms' => int, 'error' => string]` (GET job, dead letters).
     *
     * @var list<array{attempt: int, at_ms: int, error: string}>
     */
    public readonly array $errors;
    public readonly ?string $rawBody;
    public readonly ?string $bytes;
    public readonly mixed $body;

    /** @param array<string, mixed> $data */
    public function __construct(public readonly array $data, ?string $rawBody = null, string $topic = '')
    {
        $this->topic = (string) ($data['topic'] ?? $topic);
        $this->id = (string) ($data['id'] ?? '');
        $this->token = isset($data['token']) ? (string) $data['token'] : null;
        $this->attempt = isset($data['attempt']) ? (int) $data['attempt'] : null;
        $this->dueAtMs = isset($data['due_at_ms']) ? (int) $data['due_at_ms'] : null;
        $this->leaseDeadlineMs = isset($data['lease_deadline_ms']) ? (int) $data['lease_deadline_ms'] : null;
        $this->priority = isset($data['priority']) ? (int) $data['priority'] : null;
        $this->state = isset($data['state']) ? (string) $data['state'] : null;
        $this->attempts = isset($data['attempts']) ? (int) $data['attempts'] : null;
        $this->lastError = isset($data['last_error']) ? (string) $data['last_error'] : null;
        $errors = [];
        foreach (is_array($data['errors'] ?? null) ? $data['errors'] : [] as $e) {
            $errors[] = ['attempt' => (int) ($e['attempt'] ?? 0), 'at_ms' => (int) ($e['at_ms'] ?? 0), 'error' => (string) ($e['error'] ?? '')];
        }
        $this->errors = $errors;
        if (array_key_exists('body_base64', $data)) {
            $this->rawBody = null;
            $this->bytes = base64_decode((string) $data['body_base64'], true) ?: '';
            $this->body = null;
        } else {
            $this->bytes = null;
            $this->rawBody = $rawBody ?? json_encode($data['body'] ?? null, Json::ENCODE);
            $this->body = Json::decodeBody($this->rawBody);
        }
    }

    /** The JSON body with objects as associative arrays (`{}` becomes `[]`). */
    public function json(bool $assoc = true): mixed
    {
        if ($this->rawBody === null) {
            return null;
        }
        return json_decode($this->rawBody, $assoc, 1024, JSON_BIGINT_AS_STRING | JSON_THROW_ON_ERROR);
    }

    /**
     * Builds jobs from a reply's text: the `body` values keep their raw text.
     *
     * @param list<array<string, mixed>> $items
     * @return list<Job>
     */
    public static function listFrom(array $items, string $text, string $topic = ''): array
    {
        $raws = Json::rawValues($text);
        $k = 0;
        $out = [];
        foreach ($items as $item) {
            $raw = array_key_exists('body', $item) ? ($raws[$k++] ?? null) : null;
            $out[] = new self($item, $raw, $topic);
        }
        return $out;
    }
}
