<?php

declare(strict_types=1);

namespace Dq;

/**
 * Thrown by a handler: not now. The worker releases the job, due again after
 * `delayMs`; the attempt is not counted (e.g. "payment still pending, look
 * again in a minute").
 */
class RetryLater extends \RuntimeException
{
    public function __construct(public readonly int $delayMs = 0, string $message = '', ?\Throwable $previous = null)
    {
        parent::__construct($message !== '' ? $message : "retry in {$delayMs} ms", 0, $previous);
    }
}
