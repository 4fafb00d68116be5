import { z } from 'zod';
import { NumericTextSchema, Text } from './common.js';

/**
 * The fields every customer shape shares (the service's interface), in
 * the order the interface lists them. All strings; MobileNumber may be null.
 */
const personFields = {
  FirstName: Text,
  MiddleName: Text,
  LastName: Text,
  NamePrefix: Text,
  NameSuffix: Text,
  Title: Text,
  Company: Text,
  EmailAddress: Text,
  AddressLine1: Text,
  AddressLine2: Text,
  City: Text,
  StateProvince: Text,
  PostalCode: Text,
  CountryCode: Text,
  HomeNumber: Text,
  MobileNumber: z.string().nullable(),
  WorkNumber: Text,
  FAXNumber: Text,
  WebPageURL: Text,
};

/** A customer as search and get return it: every field of 2.1. */
export const CustomerSchema = z.object({
  CustomerID: NumericTextSchema,
  CollectionMethod: Text,
  ...personFields,
  Password: Text,
});
export type Customer = z.infer<typeof CustomerSchema>;

/**
 * The body of create (4.3) and update (4.4): the fields of 2.1 other than
 * CustomerID and CollectionMethod. Strict: a member the interface does not
 * show is refused, so a mapping mistake cannot leak into the service.
 */
export const CustomerInputSchema = z.strictObject({
  ...personFields,
  Password: Text,
});
export type CustomerInput = z.infer<typeof CustomerInputSchema>;

/** The customer inside a sign-up (4.6): no CustomerID, CollectionMethod or Password. */
export const SignupCustomerSchema = z.strictObject(personFields);
export type SignupCustomer = z.infer<typeof SignupCustomerSchema>;

/** Every customer field name of 2.1 in interface order, CustomerID first (export columns). */
export const CUSTOMER_FIELDS = Object.keys(CustomerSchema.shape) as ReadonlyArray<keyof Customer>;
/** The members of a create or update body. */
export const CUSTOMER_INPUT_FIELDS = Object.keys(CustomerInputSchema.shape) as ReadonlyArray<keyof CustomerInput>;
/** The members of a sign-up's customer. */
export const SIGNUP_CUSTOMER_FIELDS = Object.keys(SignupCustomerSchema.shape) as ReadonlyArray<keyof SignupCustomer>;
