<?php

declare(strict_types=1);

namespace Dq;

/**
 * Thrown by a handler: the job failed for good. The worker nacks it with
 * `dead: true` (a dead letter at once, whatever attempts are left), with
 * this exception's message as the error.
 */
class Dead extends \RuntimeException
{
}
