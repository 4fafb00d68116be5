export * from './common.js';
export * from './customer.js';
export * from './creditCard.js';
export * from './subscription.js';
export * from './offer.js';
export * from './bodies.js';
