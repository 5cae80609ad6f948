// The Tessera TurboModule (and legacy native module): registration and type conversion only.
// The work happens in TesseraImpl.swift, off the JS thread.

#import <React/RCTBridgeModule.h>
#import <React/RCTEventEmitter.h>

#ifdef RCT_NEW_ARCH_ENABLED
#import <RNTesseraSpec/RNTesseraSpec.h>
#endif

// The Swift classes of this pod (module "Tessera").
#if __has_include(<Tessera/Tessera-Swift.h>)
#import <Tessera/Tessera-Swift.h>
#else
#import "Tessera-Swift.h"
#endif

static NSString *const TesseraLogEvent = @"TesseraLog";
// Protocol events (loading progress, tokens) as { json: <the event's JSON text> }.
static NSString *const TesseraProtocolEvent = @"TesseraEvent";

@interface Tessera : RCTEventEmitter
#ifdef RCT_NEW_ARCH_ENABLED
                     <NativeTesseraSpec>
#else
                     <RCTBridgeModule>
#endif
@end

@implementation Tessera {
  TesseraImpl *_impl;
  BOOL _hasListeners;
}

RCT_EXPORT_MODULE(Tessera)

+ (BOOL)requiresMainQueueSetup
{
  return NO;
}

- (instancetype)init
{
  if (self = [super init]) {
    _impl = [TesseraImpl new];
    __weak Tessera *weakSelf = self;
    [_impl setEventEmitter:^(NSString *json) {
      Tessera *strongSelf = weakSelf;
      if (strongSelf == nil || !strongSelf->_hasListeners) {
        return;
      }
      [strongSelf sendEventWithName:TesseraProtocolEvent body:@{@"json" : json}];
    }];
  }
  return self;
}

- (NSArray<NSString *> *)supportedEvents
{
  return @[ TesseraLogEvent, TesseraProtocolEvent ];
}

- (void)startObserving
{
  _hasListeners = YES;
}

- (void)stopObserving
{
  _hasListeners = NO;
}

RCT_EXPORT_METHOD(call : (NSString *)requestJson resolve : (RCTPromiseResolveBlock)resolve reject : (RCTPromiseRejectBlock)reject)
{
  [_impl call:requestJson
      resolve:^(NSString *response) {
        resolve(response);
      }
      reject:^(NSString *code, NSString *message) {
        reject(code, message, nil);
      }];
}

RCT_EXPORT_METHOD(toggleNativeLog : (BOOL)enabled)
{
  __weak Tessera *weakSelf = self;
  [_impl setLogForwarding:enabled
                     emit:^(NSString *level, NSString *target, NSString *message) {
                       Tessera *strongSelf = weakSelf;
                       if (strongSelf == nil || !strongSelf->_hasListeners) {
                         return;
                       }
                       [strongSelf sendEventWithName:TesseraLogEvent
                                                body:@{@"level" : level, @"target" : target, @"message" : message}];
                     }];
}

- (void)invalidate
{
  [_impl invalidate];
  if ([RCTEventEmitter instancesRespondToSelector:@selector(invalidate)]) {
    [super invalidate];
  }
}

#ifdef RCT_NEW_ARCH_ENABLED
- (std::shared_ptr<facebook::react::TurboModule>)getTurboModule:(const facebook::react::ObjCTurboModule::InitParams &)params
{
  return std::make_shared<facebook::react::NativeTesseraSpecJSI>(params);
}
#endif

@end
