<?php

declare(strict_types=1);

namespace Dq;

/**
 * dq could not be reached, or the connection broke, or the reply was not
 * what the API documents. `curlErrno` is curl's error number (0 for a reply
 * that could not be decoded); `connectFailed` says nothing was sent.
 */
class TransportException extends \RuntimeException
{
    public function __construct(
        string $message,
        public readonly int $curlErrno = 0,
        public readonly bool $connectFailed = false,
        ?\Throwable $previous = null,
    ) {
        parent::__construct($message, $curlErrno, $previous);
    }
}
