/**
 * react-native-tessera: on-device inference for React Native, with a ggml-style graph engine
 * in Rust.
 *
 * - {@link getDevices}, {@link getCpuFeatures}, {@link getBuildInfo}: what the device offers;
 * - {@link graph} / {@link GraphBuilder}: build a graph of tensor ops, checked as it is built;
 * - {@link compute} and {@link Session}: run it off the JS thread; {@link Session.load} /
 *   {@link LoadedGraph}: load a graph once (with weights read in place from model files) and
 *   compute it many times with only its inputs;
 * - {@link ggufInfo}: a GGUF model file's metadata and tensor table;
 * - {@link loadModel} / {@link LanguageModel}: language models (GGUF): tokenize, chat
 *   templates, streaming completions, embeddings;
 * - {@link toggleNativeLog}, {@link addNativeLogListener}: the Rust core's log.
 *
 * @packageDocumentation
 */

export {
  DTYPES,
  DTYPE_INFO,
  isDType,
  isFloat,
  isQuantized,
  type ArrayFor,
  type DType,
  type FloatDType,
  type HalfDType,
  type QuantizedDType,
  type TensorArray,
} from './dtype';
export {
  CancelledError,
  ClosedError,
  ContextFullError,
  DataLengthError,
  DTypeError,
  InvalidArgumentError,
  InvalidGraphError,
  InvalidModelError,
  NativeLibraryError,
  NativeModuleMissingError,
  NetworkError,
  ShapeError,
  StorageError,
  TesseraError,
  errorOfKind,
  type BridgeErrorKind,
  type NativeErrorKind,
  type TesseraErrorKind,
} from './errors';
export {
  GRAPH_FORMAT_VERSION,
  GraphBuilder,
  Tensor,
  graph,
  type ConstantOptions,
  type FileDocument,
  type FileTensorDocument,
  type GraphDocumentV2,
  type GluOptions,
  type GraphDocument,
  type NodeDocument,
  type OpName,
  type ParamValue,
  type RopeOptions,
  type SoftmaxOptions,
  type TensorDocument,
  type TensorKind,
  type ViewOptions,
} from './graph';
export { graphFromDocument } from './document';
export {
  ggufInfo,
  type GgufInfo,
  type GgufInfoOptions,
  type GgufMetadataEntry,
  type GgufTensorInfo,
  type GgufValue,
  type GgufValueType,
} from './gguf';
export {
  LoadedGraph,
  Session,
  compute,
  setLogLevel,
  toggleNativeLog,
  type AbortSignalLike,
  type AnyTensorValue,
  type ComputeInputs,
  type ComputeOptions,
  type ComputeResult,
  type GraphLike,
  type InputValue,
  type LoadableDocument,
  type LoadableGraph,
  type LogLevel,
  type SessionComputeOptions,
  type SessionOptions,
  type TensorValue,
} from './compute';
export {
  getBuildInfo,
  getCpuFeatures,
  getDevices,
  type BuildInfo,
  type CpuFeaturePair,
  type CpuFeatures,
  type DeviceCaps,
  type DeviceInfo,
  type DeviceType,
  type KernelTier,
} from './features';
export {
  addNativeLogListener,
  setNativeCaller,
  type NativeCaller,
  type NativeEventListener,
  type NativeLogEvent,
  type NativeLogListener,
} from './caller';
export {
  bfloat16BitsToFloat32,
  bfloat16ToFloat32,
  float16BitsToFloat32,
  float16ToFloat32,
  float32ToBFloat16,
  float32ToBFloat16Bits,
  float32ToFloat16,
  float32ToFloat16Bits,
} from './half';
export { base64FromBytes, bytesFromBase64 } from './base64';
export { toFloat32 } from './convert';
export {
  LanguageModel,
  loadModel,
  releaseAllModels,
  type ChatMessage,
  type ChatTemplateOptions,
  type Completion,
  type CompletionChunk,
  type CompletionOptions,
  type CompletionResult,
  type CompletionTimings,
  type DetokenizeOptions,
  type EmbedOptions,
  type KvCacheType,
  type LoadModelOptions,
  type LoadProgressCallback,
  type ModelInfo,
  type RerankOptions,
  type RerankResult,
  type ResponseFormat,
  type SessionFileOptions,
  type StopReason,
  type TokenEvent,
  type TokenizeOptions,
  type TokenProbability,
  type TokenProbs,
  type ToolCall,
  type ToolDefinition,
} from './model';
export { ChatSession, type ChatSessionOptions } from './chat';
export {
  useCompletion,
  useModel,
  type CompletionState,
  type ModelSource,
  type ModelState,
  type ModelStatus,
  type UseModelOptions,
} from './hooks';
export {
  deleteModel,
  downloadModel,
  listModels,
  type DownloadModelOptions,
  type DownloadProgressCallback,
  type DownloadedModel,
} from './download';
