/**
 * The model screen: pick a GGUF file on the device (or download one from a URL), see its info,
 * and chat with it: the reply streams token by token, Stop aborts it, and the line under each
 * reply gives the tokens per second.
 */

import React, { useCallback, useEffect, useRef, useState } from 'react';
import { Button, ScrollView, StyleSheet, Text, TextInput, View } from 'react-native';
import { errorCodes, isErrorWithCode, keepLocalCopy, pick, types } from '@react-native-documents/picker';
import { DocumentDirectoryPath, downloadFile, stopDownload } from '@dr.pogodin/react-native-fs';
import { TesseraError, loadModel, type ChatMessage, type LanguageModel } from 'react-native-tessera';

interface Turn extends ChatMessage {
  /** For replies: "12.3 tokens/s · 42 tokens · stopped (length)". */
  stats?: string;
}

const MB = 1024 * 1024;

function describe(e: unknown): string {
  return e instanceof TesseraError ? `${e.kind}: ${e.message}` : e instanceof Error ? e.message : String(e);
}

/** The file name at the end of a URL, for the downloaded copy. */
function fileNameOf(url: string): string {
  const last = url.split('?')[0]?.split('/').pop() ?? '';
  return last.endsWith('.gguf') ? decodeURIComponent(last) : 'model.gguf';
}

export default function ModelScreen(): React.JSX.Element {
  const [model, setModel] = useState<LanguageModel | null>(null);
  const [status, setStatus] = useState('No model loaded.');
  const [error, setError] = useState<string | null>(null);
  const [url, setUrl] = useState('');
  const [busy, setBusy] = useState(false);
  const [turns, setTurns] = useState<Turn[]>([]);
  const [input, setInput] = useState('');
  const [reply, setReply] = useState<string | null>(null);
  const abort = useRef<AbortController | null>(null);
  const download = useRef<number | null>(null);
  const current = useRef<LanguageModel | null>(null);

  // The model is released when the screen goes away.
  useEffect(() => () => void current.current?.release(), []);

  const load = useCallback(async (path: string) => {
    await current.current?.release();
    current.current = null;
    setModel(null);
    setTurns([]);
    setStatus('Loading…');
    const m = await loadModel(path, { nCtx: 2048 }, (p) => setStatus(`Loading… ${Math.round(p * 100)}%`));
    current.current = m;
    setModel(m);
    setStatus(`Loaded ${path.split('/').pop()}`);
  }, []);

  const run = useCallback(async (work: () => Promise<void>) => {
    setBusy(true);
    setError(null);
    try {
      await work();
    } catch (e) {
      // Closing the picker is not an error.
      if (!(isErrorWithCode(e) && e.code === errorCodes.OPERATION_CANCELED)) setError(describe(e));
      setStatus((s) => (current.current ? s : 'No model loaded.'));
    } finally {
      setBusy(false);
    }
  }, []);

  const onPick = () =>
    run(async () => {
      const [file] = await pick({ type: [types.allFiles] });
      setStatus('Copying the file into the app…');
      // Android gives content:// URIs: the model must be a file the core can map.
      const [copy] = await keepLocalCopy({
        files: [{ uri: file.uri, fileName: file.name ?? 'model.gguf' }],
        destination: 'documentDirectory',
      });
      if (copy.status !== 'success') throw new Error(`could not copy ${file.name}: ${copy.copyError}`);
      await load(copy.localUri);
    });

  const onDownload = () =>
    run(async () => {
      const toFile = `${DocumentDirectoryPath}/${fileNameOf(url.trim())}`;
      const job = downloadFile({
        fromUrl: url.trim(),
        toFile,
        progressInterval: 250,
        progress: (r) =>
          setStatus(
            r.contentLength > 0
              ? `Downloading… ${((100 * r.bytesWritten) / r.contentLength).toFixed(0)}% of ${(r.contentLength / MB).toFixed(0)} MB`
              : `Downloading… ${(r.bytesWritten / MB).toFixed(0)} MB`
          ),
      });
      download.current = job.jobId;
      try {
        const res = await job.promise;
        if (res.statusCode !== 200) throw new Error(`download failed: HTTP ${res.statusCode}`);
      } finally {
        download.current = null;
      }
      await load(toFile);
    });

  const onSend = () =>
    run(async () => {
      if (!model || input.trim() === '') return;
      const history: Turn[] = [...turns, { role: 'user', content: input.trim() }];
      setTurns(history);
      setInput('');
      setReply('');
      abort.current = new AbortController();
      const completion = model.complete(
        history.map(({ role, content }) => ({ role, content })),
        { maxTokens: 256, temperature: 0.7, topP: 0.95, signal: abort.current.signal }
      );
      let text = '';
      for await (const { text: piece } of completion) {
        text += piece;
        setReply(text);
      }
      const r = await completion.result;
      const t = r.timings;
      const stats =
        `${t.predicted_per_second.toFixed(1)} tokens/s · ${t.predicted_n} tokens · ` +
        `prompt ${t.prompt_n} at ${t.prompt_per_second.toFixed(0)} tokens/s · ${r.stopReason}`;
      setTurns([...history, { role: 'assistant', content: r.text, stats }]);
      setReply(null);
      abort.current = null;
    });

  const onStop = () => {
    abort.current?.abort();
    if (download.current !== null) stopDownload(download.current);
  };

  const info = model?.info;
  return (
    <ScrollView contentContainerStyle={styles.content} keyboardShouldPersistTaps="handled">
      <Text style={styles.heading}>Model</Text>
      <Button title="Pick a GGUF file" onPress={onPick} disabled={busy} />
      <TextInput
        style={styles.input}
        value={url}
        onChangeText={setUrl}
        placeholder="or a URL: https://…/model.gguf"
        autoCapitalize="none"
        autoCorrect={false}
      />
      <Button title="Download and load" onPress={onDownload} disabled={busy || !/^https?:\/\//.test(url.trim())} />
      <Text style={styles.row}>{status}</Text>
      {info && (
        <Text style={styles.dim}>
          {info.name ?? info.architecture} · {info.architecture} · {(info.nParams / 1e6).toFixed(0)}M parameters ·{' '}
          {info.quantization} · {(info.sizeBytes / MB).toFixed(0)} MB · context {info.nCtx} of {info.nCtxTrain} ·{' '}
          {info.nLayer} layers · vocabulary {info.nVocab} · {info.device}
          {info.hasChatTemplate ? '' : ' · no chat template'}
        </Text>
      )}
      {error && <Text style={styles.error}>{error}</Text>}

      {model && (
        <View>
          <Text style={styles.heading}>Chat</Text>
          {turns.map((t, i) => (
            <View key={i} style={t.role === 'user' ? styles.user : styles.assistant}>
              <Text style={styles.row}>{t.content}</Text>
              {t.stats && <Text style={styles.dim}>{t.stats}</Text>}
            </View>
          ))}
          {reply !== null && (
            <View style={styles.assistant}>
              <Text style={styles.row}>{reply || '…'}</Text>
            </View>
          )}
          <TextInput style={styles.input} value={input} onChangeText={setInput} placeholder="Message" multiline />
          <View style={styles.buttons}>
            <Button title="Send" onPress={onSend} disabled={busy || input.trim() === ''} />
            <Button title="Stop" onPress={onStop} disabled={!busy} />
            <Button title="Clear" onPress={() => setTurns([])} disabled={busy} />
          </View>
        </View>
      )}
      {!model && busy && <Button title="Stop" onPress={onStop} />}
    </ScrollView>
  );
}

const styles = StyleSheet.create({
  content: { padding: 16 },
  heading: { fontSize: 17, fontWeight: '600', marginTop: 16, marginBottom: 6 },
  row: { fontSize: 14, marginVertical: 2 },
  dim: { fontSize: 12, color: '#666' },
  error: { color: '#b00020', marginTop: 8 },
  input: { borderWidth: 1, borderColor: '#ccc', borderRadius: 6, padding: 8, marginVertical: 8 },
  buttons: { flexDirection: 'row', justifyContent: 'space-around' },
  user: { backgroundColor: '#e8f0fe', borderRadius: 8, padding: 8, marginVertical: 4, marginLeft: 40 },
  assistant: { backgroundColor: '#f1f3f4', borderRadius: 8, padding: 8, marginVertical: 4, marginRight: 40 },
});
