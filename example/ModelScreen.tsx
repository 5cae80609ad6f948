/**
 * The model screen: the models in the app's models folder (downloaded here, or picked from the
 * device), a download form (URL and SHA-256, with progress and Cancel), and a chat with the
 * chosen model through the package's hooks: `useModel` loads it (and releases it when another
 * is chosen), a `ChatSession` keeps the conversation and the model's cache, `useCompletion`
 * streams each reply; Stop aborts it (the text so far stays), and each reply ends with its
 * tokens per second and how many prompt tokens the cache saved.
 */

import React, { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { Button, Platform, ScrollView, StyleSheet, Text, TextInput, View } from 'react-native';
import { errorCodes, isErrorWithCode, keepLocalCopy, pick, types } from '@react-native-documents/picker';
import {
  ChatSession,
  TesseraError,
  deleteModel,
  downloadModel,
  listModels,
  useCompletion,
  useModel,
  type CompletionResult,
  type DownloadedModel,
  type LanguageModel,
} from 'react-native-tessera';

const MB = 1024 * 1024;

function describe(e: unknown): string {
  return e instanceof TesseraError ? `${e.kind}: ${e.message}` : e instanceof Error ? e.message : String(e);
}

function statsOf(r: CompletionResult): string {
  const t = r.timings;
  return (
    `${t.predicted_per_second.toFixed(1)} tokens/s · ${t.predicted_n} tokens · prompt ${t.prompt_n} ` +
    `(${t.cache_n} from the cache) at ${t.prompt_per_second.toFixed(0)} tokens/s · ${r.stopReason}`
  );
}

export default function ModelScreen(): React.JSX.Element {
  const [models, setModels] = useState<DownloadedModel[]>([]);
  const [picked, setPicked] = useState<string | null>(null);
  const [url, setUrl] = useState('');
  const [sha256, setSha256] = useState('');
  const [download, setDownload] = useState<{ received: number; total: number | null } | null>(null);
  const [error, setError] = useState<string | null>(null);
  const cancelDownload = useRef<AbortController | null>(null);

  const refresh = useCallback(() => {
    listModels().then(setModels, (e: unknown) => setError(describe(e)));
  }, []);
  useEffect(refresh, [refresh]);

  // The hook loads the chosen model and releases it when another is chosen or the app closes.
  const { model, status, progress, error: loadError } = useModel(picked, { nCtx: 2048 });
  // A new session per model, and per Clear.
  const [conversation, setConversation] = useState(0);
  const chat = useMemo(
    () => (model ? new ChatSession(model, { completion: { maxTokens: 256, temperature: 0.7 } }) : null),
    // eslint-disable-next-line react-hooks/exhaustive-deps
    [model, conversation]
  );
  const { response, isGenerating, messages, result, error: replyError, complete, stop } = useCompletion(chat);
  const [input, setInput] = useState('');
  const [stats, setStats] = useState<string[]>([]);
  useEffect(() => setStats([]), [chat]);
  useEffect(() => {
    if (result) setStats((s) => [...s, statsOf(result)]);
  }, [result]);

  const onDownload = async () => {
    setError(null);
    cancelDownload.current = new AbortController();
    setDownload({ received: 0, total: null });
    try {
      const m = await downloadModel(url.trim(), {
        sha256: sha256.trim(),
        signal: cancelDownload.current.signal,
        onProgress: (received, total) => setDownload({ received, total }),
      });
      refresh();
      setPicked(m.path);
    } catch (e) {
      setError(describe(e));
    } finally {
      setDownload(null);
      cancelDownload.current = null;
    }
  };

  const onPick = async () => {
    setError(null);
    try {
      const [file] = await pick({ type: [types.allFiles] });
      // Android: the content:// URI as it is (read in place where the provider allows). iOS: a
      // local copy of the picked file.
      if (Platform.OS === 'android') {
        setPicked(file.uri);
        return;
      }
      const [copy] = await keepLocalCopy({ files: [{ uri: file.uri, fileName: file.name ?? 'model.gguf' }], destination: 'documentDirectory' });
      if (copy.status !== 'success') throw new Error(`could not copy ${file.name}: ${copy.copyError}`);
      setPicked(copy.localUri);
    } catch (e) {
      // Closing the picker is not an error.
      if (!(isErrorWithCode(e) && e.code === errorCodes.OPERATION_CANCELED)) setError(describe(e));
    }
  };

  const onDelete = async (m: DownloadedModel) => {
    if (picked === m.path) setPicked(null);
    try {
      await deleteModel(m.name);
    } catch (e) {
      setError(describe(e));
    }
    refresh();
  };

  const onSend = () => {
    const text = input.trim();
    if (!chat || text === '') return;
    setInput('');
    complete(text).catch((e: unknown) => setError(describe(e)));
  };

  const info = model?.info;
  const replies = messages.filter((m) => m.role === 'assistant').length;
  return (
    <ScrollView contentContainerStyle={styles.content} keyboardShouldPersistTaps="handled">
      <Text style={styles.heading}>Models on this device</Text>
      {models.length === 0 && <Text style={styles.dim}>None yet: download one below, or pick a file.</Text>}
      {models.map((m) => (
        <View key={m.name} style={styles.modelRow}>
          <Text style={[styles.row, styles.grow]}>
            {m.path === picked ? '▶ ' : ''}
            {m.name} · {(m.size / MB).toFixed(0)} MB{m.sha256 ? ' · checked' : ''}
          </Text>
          <Button title="Use" onPress={() => setPicked(m.path)} disabled={m.path === picked} />
          <Button title="Delete" onPress={() => onDelete(m)} />
        </View>
      ))}
      <Button title="Pick a GGUF file" onPress={onPick} />

      <Text style={styles.heading}>Download</Text>
      <TextInput style={styles.input} value={url} onChangeText={setUrl} placeholder="https://…/model.gguf" autoCapitalize="none" autoCorrect={false} />
      <TextInput
        style={styles.input}
        value={sha256}
        onChangeText={setSha256}
        placeholder="its SHA-256 (64 hex digits, from the model's page)"
        autoCapitalize="none"
        autoCorrect={false}
      />
      {download ? (
        <View style={styles.modelRow}>
          <Text style={[styles.row, styles.grow]}>
            {download.total
              ? `${((100 * download.received) / download.total).toFixed(0)}% of ${(download.total / MB).toFixed(0)} MB`
              : `${(download.received / MB).toFixed(0)} MB`}
          </Text>
          <Button title="Cancel" onPress={() => cancelDownload.current?.abort()} />
        </View>
      ) : (
        <Button title="Download" onPress={onDownload} disabled={!/^https?:\/\//.test(url.trim()) || !/^[0-9a-fA-F]{64}$/.test(sha256.trim())} />
      )}
      {error && <Text style={styles.error}>{error}</Text>}

      {picked && (
        <View>
          <Text style={styles.heading}>Chat</Text>
          {status === 'loading' && <Text style={styles.row}>Loading… {Math.round(progress * 100)}%</Text>}
          {loadError && <Text style={styles.error}>{describe(loadError)}</Text>}
          {info && (
            <Text style={styles.dim}>
              {info.name ?? info.architecture} · {(info.nParams / 1e6).toFixed(0)}M parameters · {info.quantization} · context {info.nCtx} ·{' '}
              {info.device}
              {info.hasChatTemplate ? '' : ' · no chat template'}
            </Text>
          )}
          {messages.map((m, i) => {
            const line = m.role === 'assistant' ? stats[messages.slice(0, i).filter((x) => x.role === 'assistant').length] : undefined;
            return (
              <View key={i} style={m.role === 'user' ? styles.user : styles.assistant}>
                <Text style={styles.row}>{m.content}</Text>
                {line && <Text style={styles.dim}>{line}</Text>}
              </View>
            );
          })}
          {isGenerating && (
            <View style={styles.assistant}>
              <Text style={styles.row}>{response || '…'}</Text>
            </View>
          )}
          {replyError && <Text style={styles.error}>{describe(replyError)}</Text>}
          <TextInput style={styles.input} value={input} onChangeText={setInput} placeholder="Message" multiline />
          <View style={styles.buttons}>
            <Button title="Send" onPress={onSend} disabled={!chat || isGenerating || input.trim() === ''} />
            <Button title="Stop" onPress={stop} disabled={!isGenerating} />
            <Button
              title="Clear"
              onPress={() => setConversation((n) => n + 1)}
              disabled={isGenerating || replies === 0}
            />
          </View>
          {model && <FormFill model={model} disabled={isGenerating} />}
        </View>
      )}
    </ScrollView>
  );
}

/** The contact card the form-fill button asks for: the answer always validates against it. */
const CONTACT_SCHEMA = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 40 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    city: { type: 'string', maxLength: 40 },
    email: { type: 'string', pattern: '^[a-z0-9._-]+@[a-z0-9.-]+\\.[a-z]{2,}$' },
  },
  required: ['name', 'age', 'city'],
  additionalProperties: false,
};

/**
 * Structured output: a sentence turned into a contact card by a JSON-schema constrained
 * completion (Gemma 3 270M fills it in a second on a phone), shown field by field.
 */
function FormFill({ model, disabled }: { model: LanguageModel; disabled: boolean }): React.JSX.Element {
  const [sentence, setSentence] = useState('Ana Sousa is 31, lives in Porto, ana.sousa@example.com');
  const [card, setCard] = useState<Record<string, unknown> | null>(null);
  const [busy, setBusy] = useState(false);
  const [failure, setFailure] = useState<string | null>(null);
  const onFill = async () => {
    setBusy(true);
    setFailure(null);
    try {
      const r = await model.complete([{ role: 'user', content: `Extract the contact card from: ${sentence}` }], {
        responseFormat: { type: 'json_schema', schema: CONTACT_SCHEMA },
        temperature: 0.2,
        maxTokens: 128,
      }).result;
      setCard(JSON.parse(r.text) as Record<string, unknown>);
    } catch (e) {
      setFailure(describe(e));
    } finally {
      setBusy(false);
    }
  };
  return (
    <View>
      <Text style={styles.heading}>Form fill (JSON schema)</Text>
      <TextInput style={styles.input} value={sentence} onChangeText={setSentence} multiline />
      <Button title={busy ? 'Filling…' : 'Fill the form'} onPress={onFill} disabled={disabled || busy || sentence.trim() === ''} />
      {card &&
        Object.entries(card).map(([k, v]) => (
          <Text key={k} style={styles.row}>
            {k}: {String(v)}
          </Text>
        ))}
      {failure && <Text style={styles.error}>{failure}</Text>}
    </View>
  );
}

const styles = StyleSheet.create({
  content: { padding: 16 },
  heading: { fontSize: 17, fontWeight: '600', marginTop: 16, marginBottom: 6 },
  row: { fontSize: 14, marginVertical: 2 },
  grow: { flex: 1 },
  dim: { fontSize: 12, color: '#666' },
  error: { color: '#b00020', marginTop: 8 },
  input: { borderWidth: 1, borderColor: '#ccc', borderRadius: 6, padding: 8, marginVertical: 8 },
  buttons: { flexDirection: 'row', justifyContent: 'space-around' },
  modelRow: { flexDirection: 'row', alignItems: 'center', marginVertical: 2 },
  user: { backgroundColor: '#e8f0fe', borderRadius: 8, padding: 8, marginVertical: 4, marginLeft: 40 },
  assistant: { backgroundColor: '#f1f3f4', borderRadius: 8, padding: 8, marginVertical: 4, marginRight: 40 },
});
