<?php

declare(strict_types=1);

namespace Dq;

/**
 * dq answered with an error: `status` is the HTTP status, `errorCode` dq's
 * machine-readable code (`job_not_found`, `lease_mismatch`, `invalid_delay`,
 * ...), getMessage() the server's message, `retryAfterMs` the Retry-After
 * header (when the server sent one).
 */
class DqException extends \RuntimeException
{
    public function __construct(
        public readonly int $status,
        public readonly string $errorCode,
        string $message,
        public readonly ?int $retryAfterMs = null,
        ?\Throwable $previous = null,
    ) {
        parent::__construct($message !== '' ? $message : "HTTP $status ($errorCode)", $status, $previous);
    }

    /** Whether trying again later may succeed (a 503: store unavailable, draining, ...). */
    public function isTransient(): bool
    {
        return $this->status === 503;
    }

    /** The error of one item of a batch answer (`{"error": {"code", "message"}}`). */
    public static function fromItem(array $item): self
    {
        $code = (string) ($item['error']['code'] ?? '');
        $status = match (true) {
            $code === 'job_not_found', $code === 'topic_not_found' => 404,
            $code === 'lease_mismatch', $code === 'not_in_state' => 409,
            str_starts_with($code, 'store_') => 503,
            default => 400,
        };
        return new self($status, $code, (string) ($item['error']['message'] ?? ''));
    }
}
