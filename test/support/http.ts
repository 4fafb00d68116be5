import { request } from 'undici';

/** A raw HTTP call, for what the typed client never sends (missing parameters, bad JSON). */
export async function rawRequest(
  url: string,
  options: { method?: 'GET' | 'POST' | 'PUT' | 'DELETE'; body?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; json: unknown; headers: Record<string, string | string[] | undefined> }> {
  const response = await request(url, {
    method: options.method ?? 'GET',
    body: options.body,
    headers: { 'content-type': 'application/json', ...options.headers },
  });
  const text = await response.body.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: response.statusCode, json, headers: response.headers };
}

/** The Message member of an answer, or undefined. */
export function messageOf(json: unknown): string | undefined {
  if (typeof json !== 'object' || json === null || !('Message' in json)) return undefined;
  const message = json.Message;
  return typeof message === 'string' ? message : undefined;
}
