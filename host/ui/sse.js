// Server-sent events over fetch: EventSource cannot send an Authorization
// header, so the console reads the response body itself and parses the
// text/event-stream format (fields `event`, `id`, `data`; a blank line ends
// an event; lines starting with ':' are comments).

/** A parser fed chunks of text; calls `onEvent({event, id, data})`. */
export function sseParser(onEvent) {
  let buffer = '';
  let event = { event: 'message', id: null, data: [] };
  const dispatch = () => {
    if (event.data.length) onEvent({ event: event.event, id: event.id, data: event.data.join('\n') });
    event = { event: 'message', id: null, data: [] };
  };
  const line = (text) => {
    if (text === '') return dispatch();
    if (text.startsWith(':')) return undefined;
    const colon = text.indexOf(':');
    const field = colon < 0 ? text : text.slice(0, colon);
    let value = colon < 0 ? '' : text.slice(colon + 1);
    if (value.startsWith(' ')) value = value.slice(1);
    if (field === 'event') event.event = value;
    else if (field === 'data') event.data.push(value);
    else if (field === 'id') event.id = value;
    return undefined;
  };
  return (chunk) => {
    buffer += chunk;
    for (;;) {
      const match = /\r\n|\r|\n/.exec(buffer);
      // A lone '\r' at the end may be the first half of "\r\n": wait.
      if (!match || (match[0] === '\r' && match.index === buffer.length - 1)) break;
      line(buffer.slice(0, match.index));
      buffer = buffer.slice(match.index + match[0].length);
    }
  };
}

/** Reads an SSE `response` body until it ends or `signal` aborts. */
export async function readEvents(response, onEvent, signal) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  const feed = sseParser(onEvent);
  const stop = () => reader.cancel().catch(() => {});
  signal.addEventListener('abort', stop, { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      feed(decoder.decode(value, { stream: true }));
    }
  } finally {
    signal.removeEventListener('abort', stop);
  }
}
