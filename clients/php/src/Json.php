<?php

declare(strict_types=1);

namespace Dq;

/**
 * JSON helpers of the client.
 *
 * @internal
 */
final class Json
{
    public const ENCODE = JSON_UNESCAPED_SLASHES | JSON_UNESCAPED_UNICODE | JSON_PRESERVE_ZERO_FRACTION | JSON_THROW_ON_ERROR;

    /**
     * Encodes a request. An empty PHP array at the top is sent as `{}` (every
     * request body of the API is an object).
     */
    public static function encodeRequest(array $data): string
    {
        if ($data === []) {
            return '{}';
        }
        try {
            return json_encode($data, self::ENCODE);
        } catch (\JsonException $e) {
            throw new \InvalidArgumentException('cannot encode the request as JSON: ' . $e->getMessage(), 0, $e);
        }
    }

    /**
     * The request fields of a job body: `['body' => <JSON text>]` or
     * `['body_base64' => ...]`. Returns the JSON text to splice in.
     */
    public static function bodyFields(mixed $body): string
    {
        if ($body instanceof Bytes) {
            return '"body_base64":"' . base64_encode($body->bytes) . '"';
        }
        if ($body instanceof RawJson) {
            return '"body":' . $body->json;
        }
        try {
            return '"body":' . json_encode($body, self::ENCODE);
        } catch (\JsonException $e) {
            throw new \InvalidArgumentException('cannot encode the job body as JSON: ' . $e->getMessage(), 0, $e);
        }
    }

    /** A request object with a job body and other (wire-named) fields. */
    public static function withBody(mixed $body, array $fields): string
    {
        foreach (['body', 'body_base64'] as $k) {
            if (array_key_exists($k, $fields)) {
                throw new \InvalidArgumentException("pass the body as the body argument, not as the option '$k'");
            }
        }
        $rest = self::encodeRequest($fields);
        $b = self::bodyFields($body);
        return $rest === '{}' ? '{' . $b . '}' : '{' . $b . ',' . substr($rest, 1);
    }

    /** Decodes a reply: objects as associative arrays, big integers as strings. */
    public static function decode(string $text): mixed
    {
        try {
            return json_decode($text, true, 1024, JSON_BIGINT_AS_STRING | JSON_THROW_ON_ERROR);
        } catch (\JsonException $e) {
            throw new TransportException('dq sent a reply that is not JSON: ' . $e->getMessage());
        }
    }

    /**
     * Decodes a job body's JSON text: objects stay objects (stdClass, so `{}`
     * and `[]` stay apart), integers beyond PHP's range become strings of
     * their digits.
     */
    public static function decodeBody(string $text): mixed
    {
        return json_decode($text, false, 1024, JSON_BIGINT_AS_STRING | JSON_THROW_ON_ERROR);
    }

    /**
     * The raw text of every value of the key `$key` in the JSON document
     * `$s`, in document order; a matched value is not searched further.
     *
     * @return list<string>
     */
    public static function rawValues(string $s, string $key = 'body'): array
    {
        $out = [];
        if (!str_contains($s, '"' . $key . '"')) {
            return $out;
        }
        $needle = '"' . $key . '"';
        $nl = strlen($needle);
        $n = strlen($s);
        $i = strpos($s, '"');
        while ($i !== false && $i < $n) {
            $end = self::stringEnd($s, $i);
            $j = $end + strspn($s, " \t\r\n", $end);
            if ($j < $n && $s[$j] === ':') {
                $j++;
                $j += strspn($s, " \t\r\n", $j);
                if ($end - $i === $nl && substr_compare($s, $needle, $i, $nl) === 0) {
                    $vEnd = self::valueEnd($s, $j);
                    $out[] = substr($s, $j, $vEnd - $j);
                    $i = strpos($s, '"', $vEnd);
                    continue;
                }
                $i = strpos($s, '"', $j);
                continue;
            }
            $i = strpos($s, '"', $end);
        }
        return $out;
    }

    /** The index just after the string that starts (with its quote) at $i. */
    private static function stringEnd(string $s, int $i): int
    {
        $k = $i + 1;
        while (true) {
            $q = strpos($s, '"', $k);
            if ($q === false) {
                return strlen($s);
            }
            $bs = 0;
            for ($b = $q - 1; $b > $i && $s[$b] === '\\'; $b--) {
                $bs++;
            }
            if ($bs % 2 === 0) {
                return $q + 1;
            }
            $k = $q + 1;
        }
    }

    /** The index just after the JSON value that starts at $j. */
    private static function valueEnd(string $s, int $j): int
    {
        $n = strlen($s);
        $c = $s[$j] ?? '';
        if ($c === '"') {
            return self::stringEnd($s, $j);
        }
        if ($c !== '{' && $c !== '[') {
            return $j + strcspn($s, ",}] \t\r\n", $j);
        }
        $depth = 0;
        $k = $j;
        while ($k < $n) {
            $k += strcspn($s, '"{}[]', $k);
            if ($k >= $n) {
                break;
            }
            $c = $s[$k];
            if ($c === '"') {
                $k = self::stringEnd($s, $k);
                continue;
            }
            if ($c === '{' || $c === '[') {
                $depth++;
            } else {
                $depth--;
                if ($depth === 0) {
                    return $k + 1;
                }
            }
            $k++;
        }
        return $n;
    }
}
