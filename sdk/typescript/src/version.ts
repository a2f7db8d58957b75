// The SDK's version (package.json's; a unit test keeps them equal), sent in
// Hello.sdk and as the user agent.

export const version = "0.1.0";
export const sdkName = `tether-typescript/${version}`;
